#!/usr/bin/env bash
# Run a real single-node Apache Kafka broker (KRaft, combined broker+controller)
# straight from Maven Central jars: no Docker, no tarball download.
#
#   bash deploy/kafka/kafka.sh up       # fetch jars if needed, start, wait until ready
#   bash deploy/kafka/kafka.sh down     # stop (SIGTERM, then SIGKILL after 30 s), wipe data
#   bash deploy/kafka/kafka.sh status   # exit 0 if running and answering, 3 if stopped
#   bash deploy/kafka/kafka.sh logs [-f] [-n N]
#
# `up` prints progress on stderr and exactly one line on stdout:
#   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092
# so `export "$(bash deploy/kafka/kafka.sh up)"` works. See README.md beside this file.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

KAFKA_VERSION="${KAFKA_VERSION:-4.1.2}"
KAFKA_HOST=127.0.0.1
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
# Kafka's own default heap. With -Xmx512m -Xms256m, G1 ran concurrent marking without pause
# under load: 40% of a core beside the worker on a 2-core machine (docs/performance.md).
KAFKA_HEAP="${KAFKA_HEAP:--Xmx1g -Xms1g}"
read -r -a HEAP_OPTS <<<"$KAFKA_HEAP"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
KAFKA_KEEP_DATA="${KAFKA_KEEP_DATA:-0}"
CACHE_DIR="${KAFKA_CACHE_DIR:-$REPO/.cache}"
M2_REPO="${KAFKA_M2_REPO:-$CACHE_DIR/m2}"
LIBS_DIR="${KAFKA_LIBS_DIR:-$CACHE_DIR/kafka/libs}"
RUN_DIR="${KAFKA_RUN_DIR:-$CACHE_DIR/kafka/run}"
DATA_DIR="$RUN_DIR/data"
PROPS="$RUN_DIR/server.properties"
LOG4J_CONF="$RUN_DIR/log4j2.properties"
LOG_FILE="$RUN_DIR/kafka.log"
PID_FILE="$RUN_DIR/kafka.pid"
LOCK_FILE="$RUN_DIR/.lock"
BOOTSTRAP="$KAFKA_HOST:$KAFKA_PORT"

if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
  JAVA="${JAVA:-$JAVA_HOME/bin/java}"
else
  JAVA="${JAVA:-java}"
fi
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"
  elif command -v python3 >/dev/null 2>&1; then PYTHON=python3
  else PYTHON=""
  fi
fi

say() { echo "kafka.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# ---------------------------------------------------------------- helpers

# Pid of our broker if it is alive (and really is our kafka.Kafka), else nothing.
broker_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(tr -dc '0-9' <"$PID_FILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  # Guard against pid reuse: the process must be kafka.Kafka with our properties.
  local cmd
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *kafka.Kafka*"$PROPS"* ]] || return 1
  echo "$pid"
}

port_open() { # host port
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# A real Metadata (v4) request on the broker port; succeeds only when the broker
# answers and lists itself (node 1 at host:port) with an elected controller.
metadata_ok() {
  if [[ -z "$PYTHON" ]]; then port_open "$KAFKA_HOST" "$KAFKA_PORT"; return; fi
  "$PYTHON" - "$KAFKA_HOST" "$KAFKA_PORT" <<'PY' 2>/dev/null
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
cid = b"kafka.sh-probe"
# header v1: api_key=3 (Metadata), api_version=4, correlation_id, client_id
# body v4: topics=null (-1), allow_auto_topic_creation=false
req = struct.pack(">hhih", 3, 4, 7, len(cid)) + cid + struct.pack(">ib", -1, 0)
with socket.create_connection((host, port), timeout=3) as s:
    s.settimeout(5)
    s.sendall(struct.pack(">i", len(req)) + req)
    def read(n):
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise SystemExit(1)
            buf += chunk
        return buf
    (size,) = struct.unpack(">i", read(4))
    data = read(size)
corr, _throttle, nbrokers = struct.unpack_from(">iii", data, 0)
off = 12
brokers = []
for _ in range(nbrokers):
    node, hlen = struct.unpack_from(">ih", data, off); off += 6
    h = data[off:off + hlen].decode(); off += hlen
    (p, rlen) = struct.unpack_from(">ih", data, off); off += 6
    if rlen > 0:
        off += rlen
    brokers.append((node, h, p))
(clen,) = struct.unpack_from(">h", data, off); off += 2
if clen > 0:
    off += clen
(controller,) = struct.unpack_from(">i", data, off)
ok = corr == 7 and (1, host, port) in brokers and controller >= 0
raise SystemExit(0 if ok else 1)
PY
}

# Kafka cluster ids are 16 random bytes, base64url without padding. Never start
# with '-', or StorageTool's argument parser takes it for an option.
new_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" != -* ]] && { echo "$id"; return; }
  done
}

fetch_jars() {
  if [[ -f "$LIBS_DIR/.kafka-version" && "$(cat "$LIBS_DIR/.kafka-version")" == "$KAFKA_VERSION" ]] \
     && compgen -G "$LIBS_DIR/kafka_2.13-$KAFKA_VERSION.jar" >/dev/null; then
    return
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found (needed once to fetch Kafka $KAFKA_VERSION jars)"
  say "fetching Kafka $KAFKA_VERSION jars from Maven Central into $LIBS_DIR ..."
  local tmp="$LIBS_DIR.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$M2_REPO" "$(dirname "$LIBS_DIR")"
  if ! mvn -q -B -Dstyle.color=never -f "$HERE/pom.xml" \
        -Dmaven.repo.local="$M2_REPO" \
        -Dkafka.version="$KAFKA_VERSION" \
        -Dkafka.libs.dir="$tmp" \
        dependency:copy-dependencies 2>&1 \
      | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d' >&2; then
    rm -rf "$tmp"
    die "mvn could not fetch Kafka $KAFKA_VERSION jars"
  fi
  echo "$KAFKA_VERSION" >"$tmp/.kafka-version"
  rm -rf "$LIBS_DIR"
  mv "$tmp" "$LIBS_DIR"
}

check_java() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found (Kafka 4 needs Java 17+)"
  local v
  v="$("$JAVA" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  if ! [[ "${v%%.*}" =~ ^[0-9]+$ ]] || (( ${v%%.*} < 17 )); then
    die "Kafka $KAFKA_VERSION broker needs Java 17+, found '${v:-unknown}' at $JAVA"
  fi
}

write_config() {
  mkdir -p "$RUN_DIR" "$DATA_DIR"
  cat >"$PROPS" <<EOF
# Written by deploy/kafka/kafka.sh on every start; edits here are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$DATA_DIR
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
EOF
  cat >"$LOG4J_CONF" <<'EOF'
# Written by deploy/kafka/kafka.sh: everything to stdout, which goes to kafka.log.
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
EOF
}

format_storage() {
  if [[ -f "$DATA_DIR/meta.properties" ]]; then
    return
  fi
  local cid
  cid="$(new_cluster_id)"
  say "formatting KRaft storage in $DATA_DIR (cluster id $cid)"
  # A short-lived JVM: C1 only and serial GC start it ~1 s faster.
  "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
      -Dlog4j2.configurationFile="$LOG4J_CONF" -cp "$LIBS_DIR/*" \
      kafka.tools.StorageTool format -t "$cid" -c "$PROPS" >"$RUN_DIR/format.log" 2>&1 \
    || { cat "$RUN_DIR/format.log" >&2; die "kafka-storage format failed"; }
}

wait_ready() { # pid [kill-on-timeout]
  local pid="$1" kill_on_timeout="${2:-}" deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  while (( SECONDS < deadline )); do
    if ! kill -0 "$pid" 2>/dev/null; then
      say "broker process $pid exited during startup; last 50 lines of $LOG_FILE:"
      tail -n 50 "$LOG_FILE" >&2 || true
      if grep -q "Address already in use" "$LOG_FILE" 2>/dev/null; then
        # The port was free when `up` checked it. Inside the kernel's ephemeral range
        # (ip_local_port_range) the broker's own connection to its controller can take it.
        say "a port was taken after the check; keep KAFKA_PORT and KAFKA_CONTROLLER_PORT below" \
            "$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768), outside the ephemeral range"
      fi
      rm -f "$PID_FILE"
      exit 1
    fi
    if grep -q "Kafka Server started" "$LOG_FILE" 2>/dev/null && metadata_ok; then
      return 0
    fi
    sleep 0.5
  done
  say "broker not ready after ${KAFKA_START_TIMEOUT}s (pid $pid); last 50 lines of $LOG_FILE:"
  tail -n 50 "$LOG_FILE" >&2 || true
  if [[ -n "$kill_on_timeout" ]]; then
    say "stopping the half-started broker (raise KAFKA_START_TIMEOUT on a slow machine)"
    stop_pid "$pid"
    rm -f "$PID_FILE"
  fi
  exit 1
}

stop_pid() { # pid: SIGTERM, wait KAFKA_STOP_TIMEOUT, then SIGKILL
  local pid="$1" deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    say "still running after ${KAFKA_STOP_TIMEOUT}s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
}

with_lock() {
  mkdir -p "$RUN_DIR"
  exec 9>"$LOCK_FILE"
  flock -w 120 9 || die "another kafka.sh is holding $LOCK_FILE"
}

# ---------------------------------------------------------------- commands

cmd_up() {
  with_lock
  local pid
  if pid="$(broker_pid)"; then
    say "already running (pid $pid), checking it answers ..."
    wait_ready "$pid"
    say "ready: $BOOTSTRAP"
    echo "KAFKA_BOOTSTRAP_SERVERS=$BOOTSTRAP"
    return
  fi
  rm -f "$PID_FILE"
  for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
    port_open "$KAFKA_HOST" "$p" \
      && die "$KAFKA_HOST:$p is already in use by another process (set KAFKA_PORT / KAFKA_CONTROLLER_PORT)"
  done
  check_java
  fetch_jars
  write_config
  format_storage
  [[ -f "$LOG_FILE" ]] && mv -f "$LOG_FILE" "$LOG_FILE.prev"
  say "starting Kafka $KAFKA_VERSION on $BOOTSTRAP (controller $KAFKA_HOST:$KAFKA_CONTROLLER_PORT), log $LOG_FILE"
  # `exec` keeps the pid written by the wrapper shell the pid of the JVM;
  # setsid detaches it from the caller's process group and terminal; 9>&- keeps
  # the broker from inheriting (and forever holding) our flock.
  # shellcheck disable=SC2016  # $$ and $@ are for the inner bash
  setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" \
    "$JAVA" "${HEAP_OPTS[@]}" \
    -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$RUN_DIR" \
    -cp "$LIBS_DIR/*" kafka.Kafka "$PROPS" \
    </dev/null >"$LOG_FILE" 2>&1 9>&- &
  for _ in $(seq 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
  pid="$(tr -dc '0-9' <"$PID_FILE" 2>/dev/null || true)"
  [[ -n "$pid" ]] || die "broker did not start (no pid file); see $LOG_FILE"
  wait_ready "$pid" kill-on-timeout
  say "ready: $BOOTSTRAP (pid $pid, ${SECONDS}s)"
  echo "KAFKA_BOOTSTRAP_SERVERS=$BOOTSTRAP"
}

cmd_down() {
  with_lock
  local pid
  if pid="$(broker_pid)"; then
    say "stopping broker (pid $pid) ..."
    stop_pid "$pid"
    say "stopped"
  else
    say "not running"
  fi
  rm -f "$PID_FILE"
  if [[ "$KAFKA_KEEP_DATA" != 1 && -d "$DATA_DIR" ]]; then
    rm -rf "$DATA_DIR"
    say "removed $DATA_DIR (KAFKA_KEEP_DATA=1 keeps it)"
  fi
}

cmd_status() {
  local pid
  if ! pid="$(broker_pid)"; then
    echo "stopped"
    return 3
  fi
  local rss
  rss="$(awk '/^VmRSS/ {printf "%d MiB", $2/1024}' "/proc/$pid/status" 2>/dev/null || echo '?')"
  if metadata_ok; then
    echo "running pid=$pid rss=$rss version=$(cat "$LIBS_DIR/.kafka-version" 2>/dev/null || echo '?') bootstrap=$BOOTSTRAP log=$LOG_FILE"
    return 0
  fi
  echo "unhealthy pid=$pid rss=$rss (process alive, metadata request failed) log=$LOG_FILE"
  return 1
}

cmd_logs() {
  [[ -f "$LOG_FILE" ]] || die "no log yet at $LOG_FILE"
  if [[ $# -eq 0 ]]; then set -- -n 100; fi
  exec tail "$@" "$LOG_FILE"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  status) shift; cmd_status "$@" ;;
  logs) shift; cmd_logs "$@" ;;
  *)
    echo "usage: $0 up|down|status|logs [tail args]" >&2
    exit 2
    ;;
esac
