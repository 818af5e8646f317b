#!/usr/bin/env bash
# Run real Apache Kafka brokers (KRaft, combined broker+controller) straight from
# Maven Central jars: no Docker, no tarball download. Three topologies:
#
#   single   one node, PLAINTEXT (the default; what `make test` uses)
#   cluster  three nodes, replication 3, min.insync.replicas 2, PLAINTEXT
#   secure   one node that demands SASL_SSL + SCRAM-SHA-512, with StandardAuthorizer
#            and allow.everyone.if.no.acl.found=false (a CA and a broker certificate
#            made with openssl at start, SCRAM users added when the storage is formatted)
#
#   bash deploy/kafka/kafka.sh up [TOPOLOGY]       # fetch jars if needed, start, wait until ready
#   bash deploy/kafka/kafka.sh down [TOPOLOGY]     # stop (SIGTERM, then SIGKILL after 30 s), wipe data
#   bash deploy/kafka/kafka.sh status [TOPOLOGY]   # exit 0 if running and answering, 3 if stopped
#   bash deploy/kafka/kafka.sh logs [TOPOLOGY [NODE]] [-f] [-n N]
#   bash deploy/kafka/kafka.sh kill|stop|start TOPOLOGY NODE   # one node: SIGKILL, SIGTERM, start again
#
# `up` prints progress on stderr and exactly one line on stdout, to `export`:
#   single   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092
#   cluster  KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194
#   secure   RECURRENCE_CONFIG=<run dir>/clients/admin.toml   (the super user's client settings)
# so `export "$(bash deploy/kafka/kafka.sh up)"` works. See README.md beside this file.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

KAFKA_VERSION="${KAFKA_VERSION:-4.1.2}"
KAFKA_HOST=127.0.0.1
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
# cluster: node N (1..3) listens on KAFKA_CLUSTER_PORT+N-1, its controller on KAFKA_CLUSTER_CONTROLLER_PORT+N-1.
KAFKA_CLUSTER_PORT="${KAFKA_CLUSTER_PORT:-19192}"
KAFKA_CLUSTER_CONTROLLER_PORT="${KAFKA_CLUSTER_CONTROLLER_PORT:-19195}"
# secure: SASL_SSL for clients, mutual TLS (between brokers, and clients with a certificate), controller.
KAFKA_SECURE_PORT="${KAFKA_SECURE_PORT:-19292}"
KAFKA_SECURE_MTLS_PORT="${KAFKA_SECURE_MTLS_PORT:-19293}"
KAFKA_SECURE_CONTROLLER_PORT="${KAFKA_SECURE_CONTROLLER_PORT:-19294}"
# SCRAM users beside the super user `admin` (space-separated): created with the secured node's
# storage; an `up` naming more adds them to the running node.
KAFKA_SECURE_USERS="${KAFKA_SECURE_USERS:-}"
# Kafka's own default heap. With -Xmx512m -Xms256m, G1 ran concurrent marking without pause
# under load: 40% of a core beside the worker on a 2-core machine (docs/performance.md).
KAFKA_HEAP="${KAFKA_HEAP:--Xmx1g -Xms1g}"
read -r -a HEAP_OPTS <<<"$KAFKA_HEAP"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
KAFKA_KEEP_DATA="${KAFKA_KEEP_DATA:-0}"
CACHE_DIR="${KAFKA_CACHE_DIR:-$REPO/.cache}"
# Maven's own local repository, shared by every clone: a fresh clone copies the jars from it, not the network.
M2_REPO="${KAFKA_M2_REPO:-$HOME/.m2/repository}"
LIBS_DIR="${KAFKA_LIBS_DIR:-$CACHE_DIR/kafka/libs}"
# The single node's run dir; the other topologies' live beside it (<dir>-cluster, <dir>-secure).
RUN_BASE="${KAFKA_RUN_DIR:-$CACHE_DIR/kafka/run}"

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

# ---------------------------------------------------------------- topologies and nodes

TOPOLOGY=single
ROOT=""  # the topology's run dir

select_topology() { # single|cluster|secure
  case "$1" in
    single) ROOT="$RUN_BASE" ;;
    cluster) ROOT="$RUN_BASE-cluster" ;;
    secure) ROOT="$RUN_BASE-secure" ;;
    *) die "unknown topology '$1' (single, cluster or secure)" ;;
  esac
  TOPOLOGY="$1"
  LOCK_FILE="$ROOT/.lock"
  TLS_DIR="$ROOT/tls"
  CLIENTS_DIR="$ROOT/clients"
}

node_ids() {
  if [[ "$TOPOLOGY" == cluster ]]; then echo 1 2 3; else echo 1; fi
}

# Sets the node's paths and ports: NODE_ID, NODE_DIR, DATA_DIR, PROPS, LOG4J_CONF, LOG_FILE,
# PID_FILE, CLIENT_PORT (its bootstrap port), CONTROLLER_PORT, PROBE_PORT (where readiness is asked).
select_node() { # id
  NODE_ID="$1"
  case "$TOPOLOGY" in
    single)
      [[ "$NODE_ID" == 1 ]] || die "the single broker has one node, 1 (got '$NODE_ID')"
      NODE_DIR="$ROOT"; CLIENT_PORT="$KAFKA_PORT"; CONTROLLER_PORT="$KAFKA_CONTROLLER_PORT"
      PROBE_PORT="$CLIENT_PORT" ;;
    cluster)
      [[ "$NODE_ID" =~ ^[123]$ ]] || die "the cluster's nodes are 1, 2 and 3 (got '$NODE_ID')"
      NODE_DIR="$ROOT/node$NODE_ID"
      CLIENT_PORT=$((KAFKA_CLUSTER_PORT + NODE_ID - 1))
      CONTROLLER_PORT=$((KAFKA_CLUSTER_CONTROLLER_PORT + NODE_ID - 1))
      PROBE_PORT="$CLIENT_PORT" ;;
    secure)
      [[ "$NODE_ID" == 1 ]] || die "the secured broker has one node, 1 (got '$NODE_ID')"
      NODE_DIR="$ROOT"; CLIENT_PORT="$KAFKA_SECURE_PORT"; CONTROLLER_PORT="$KAFKA_SECURE_CONTROLLER_PORT"
      PROBE_PORT="$KAFKA_SECURE_MTLS_PORT" ;;
  esac
  DATA_DIR="$NODE_DIR/data"
  PROPS="$NODE_DIR/server.properties"
  LOG4J_CONF="$NODE_DIR/log4j2.properties"
  LOG_FILE="$NODE_DIR/kafka.log"
  PID_FILE="$NODE_DIR/kafka.pid"
}

topology_ports() { # every port the topology binds
  case "$TOPOLOGY" in
    single) echo "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" ;;
    cluster)
      local n
      for n in 0 1 2; do echo $((KAFKA_CLUSTER_PORT + n)) $((KAFKA_CLUSTER_CONTROLLER_PORT + n)); done ;;
    secure) echo "$KAFKA_SECURE_PORT" "$KAFKA_SECURE_MTLS_PORT" "$KAFKA_SECURE_CONTROLLER_PORT" ;;
  esac
}

bootstrap() {
  local servers="" n
  for n in $(node_ids); do
    select_node "$n"
    servers="${servers:+$servers,}$KAFKA_HOST:$CLIENT_PORT"
  done
  echo "$servers"
}

# The one stdout line of `up`.
export_line() {
  if [[ "$TOPOLOGY" == secure ]]; then
    echo "RECURRENCE_CONFIG=$CLIENTS_DIR/admin.toml"
  else
    echo "KAFKA_BOOTSTRAP_SERVERS=$(bootstrap)"
  fi
}

# ---------------------------------------------------------------- helpers

# Pid of the selected node if it is alive (and really is our kafka.Kafka), else nothing.
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

# A real Metadata (v4) request on the node's probe port; succeeds only when the node answers
# and lists itself (its id at host:port) with an elected controller. On the secured node it
# goes over mutual TLS with the broker's own certificate (a super user).
metadata_ok() {
  if [[ -z "$PYTHON" ]]; then port_open "$KAFKA_HOST" "$PROBE_PORT"; return; fi
  local tls=""
  [[ "$TOPOLOGY" == secure ]] && tls="$TLS_DIR"
  "$PYTHON" - "$KAFKA_HOST" "$PROBE_PORT" "$NODE_ID" "$tls" <<'PY' 2>/dev/null
import socket, ssl, struct, sys
host, port, node_id, tls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cid = b"kafka.sh-probe"
# header v1: api_key=3 (Metadata), api_version=4, correlation_id, client_id
# body v4: topics=null (-1), allow_auto_topic_creation=false
req = struct.pack(">hhih", 3, 4, 7, len(cid)) + cid + struct.pack(">ib", -1, 0)
raw = socket.create_connection((host, port), timeout=3)
if tls:
    context = ssl.create_default_context(cafile=f"{tls}/ca.pem")
    context.load_cert_chain(f"{tls}/broker.crt", f"{tls}/broker.key")
    raw = context.wrap_socket(raw, server_hostname=host)
with raw as s:
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
ok = corr == 7 and (node_id, host, port) in brokers and controller >= 0
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

# What the jars were fetched for: the version and the pom (a dependency added there refetches).
libs_stamp() {
  echo "$KAFKA_VERSION $(cksum <"$HERE/pom.xml" | cut -d' ' -f1)"
}

fetch_jars() {
  if [[ -f "$LIBS_DIR/.kafka-version" && "$(cat "$LIBS_DIR/.kafka-version")" == "$(libs_stamp)" ]] \
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
  libs_stamp >"$tmp/.kafka-version"
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

# ---------------------------------------------------------------- configuration

# What every topology writes alike but for the replication of its internal topics:
# data_config REPLICAS MIN_ISR.
data_config() {
  cat <<EOF
log.dirs=$DATA_DIR
num.partitions=1
default.replication.factor=$1
auto.create.topics.enable=false
offsets.topic.replication.factor=$1
transaction.state.log.replication.factor=$1
transaction.state.log.min.isr=$2
share.coordinator.state.topic.replication.factor=$1
share.coordinator.state.topic.min.isr=$2
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
EOF
}

write_single_config() {
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
EOF
  data_config 1 1 >>"$PROPS"
}

write_cluster_config() {
  local voters="" n
  for n in 1 2 3; do
    voters="${voters:+$voters,}$n@$KAFKA_HOST:$((KAFKA_CLUSTER_CONTROLLER_PORT + n - 1))"
  done
  cat >"$PROPS" <<EOF
# Written by deploy/kafka/kafka.sh on every start; edits here are overwritten.
# Node $NODE_ID of three; every node is a broker and a controller (a quorum of three voters).
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=$voters
listeners=PLAINTEXT://$KAFKA_HOST:$CLIENT_PORT,CONTROLLER://$KAFKA_HOST:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$CLIENT_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
min.insync.replicas=2
unclean.leader.election.enable=false
EOF
  data_config 3 2 >>"$PROPS"
}

# SASL_SSL (SCRAM-SHA-512) for clients; MTLS (mutual TLS, the broker's own certificate) between
# brokers and for clients that bring a certificate; the controller listener is mutual TLS too, so
# nothing on this node answers without a credential. A certificate's principal is its CN.
write_secure_config() {
  cat >"$PROPS" <<EOF
# Written by deploy/kafka/kafka.sh on every start; edits here are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_SECURE_CONTROLLER_PORT
listeners=SASL_SSL://$KAFKA_HOST:$KAFKA_SECURE_PORT,MTLS://$KAFKA_HOST:$KAFKA_SECURE_MTLS_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_SECURE_CONTROLLER_PORT
advertised.listeners=SASL_SSL://$KAFKA_HOST:$KAFKA_SECURE_PORT,MTLS://$KAFKA_HOST:$KAFKA_SECURE_MTLS_PORT
listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL,CONTROLLER:SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=MTLS
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.mtls.ssl.client.auth=required
listener.name.controller.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:broker
EOF
  data_config 1 1 >>"$PROPS"
}

write_config() {
  mkdir -p "$NODE_DIR" "$DATA_DIR"
  case "$TOPOLOGY" in
    single) write_single_config ;;
    cluster) write_cluster_config ;;
    secure) write_secure_config ;;
  esac
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
  if [[ "$TOPOLOGY" == secure ]]; then
    # Every authorization decision, allowed (DEBUG) and denied (INFO), in a file of its own:
    # which principal did what to which resource (the tests check an ACL set against it).
    cat >>"$LOG4J_CONF" <<EOF
appender.authz.type = File
appender.authz.name = AUTHZ
appender.authz.fileName = $NODE_DIR/authorizer.log
appender.authz.layout.type = PatternLayout
appender.authz.layout.pattern = [%d] %p %m%n
logger.authz.name = kafka.authorizer.logger
logger.authz.level = DEBUG
logger.authz.additivity = false
logger.authz.appenderRef.authz.ref = AUTHZ
EOF
  fi
}

# ---------------------------------------------------------------- the secured node's credentials

# A CA, and the broker's key and certificate signed by it (SAN IP:127.0.0.1 only: a client that
# dials "localhost" meets a host name mismatch). Made with the storage; `down` removes them.
make_tls() {
  [[ -f "$TLS_DIR/broker.pem" ]] && return
  command -v openssl >/dev/null 2>&1 || die "openssl not found (the secured broker makes its CA with it)"
  say "making a CA and the broker's certificate in $TLS_DIR"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  chmod 700 "$TLS_DIR"
  (
    cd "$TLS_DIR"
    openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -days 30 \
      -keyout ca.key -out ca.pem -subj "/CN=recurrence test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
      -keyout broker.key -out broker.csr -subj "/CN=broker"
    printf '%s\n' "subjectAltName=IP:$KAFKA_HOST" "extendedKeyUsage=serverAuth,clientAuth" \
      "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" >broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
      -extfile broker.ext -out broker.crt
    # Kafka's PEM key store reads a PKCS#8 key followed by the certificate chain.
    openssl pkcs8 -topk8 -nocrypt -in broker.key -out broker.p8
    cat broker.p8 broker.crt >broker.pem
    rm -f broker.csr broker.ext broker.p8 ca.srl
  ) >"$ROOT/openssl.log" 2>&1 || { cat "$ROOT/openssl.log" >&2; die "openssl could not make the certificates"; }
}

secure_users() { # admin first, then KAFKA_SECURE_USERS, each once
  local seen=" admin " user
  echo admin
  for user in $KAFKA_SECURE_USERS; do
    [[ "$user" =~ ^[A-Za-z0-9._-]+$ ]] || die "KAFKA_SECURE_USERS: '$user' is not a user name ([A-Za-z0-9._-])"
    [[ "$seen" == *" $user "* ]] && continue
    seen="$seen$user "
    echo "$user"
  done
}

# A password per user (made with the storage, kept while the storage is), and per user the client
# settings `recurrence` reads (NAME.toml: --config / RECURRENCE_CONFIG); for the super user also
# the Java tools' (admin.properties: kafka-acls --command-config).
write_clients() {
  mkdir -p "$CLIENTS_DIR"
  chmod 700 "$CLIENTS_DIR"
  local user password
  for user in $(secure_users); do
    if [[ ! -s "$CLIENTS_DIR/$user.password" ]]; then
      (umask 077; head -c 18 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' >"$CLIENTS_DIR/$user.password")
    fi
    cat >"$CLIENTS_DIR/$user.toml" <<EOF
# Written by deploy/kafka/kafka.sh: the secured broker's client settings for $user.
[kafka]
bootstrap_servers = "$KAFKA_HOST:$KAFKA_SECURE_PORT"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "$user"
sasl_password_file = "$CLIENTS_DIR/$user.password"
ssl_cafile = "$TLS_DIR/ca.pem"
EOF
  done
  password="$(cat "$CLIENTS_DIR/admin.password")"
  (umask 077; cat >"$CLIENTS_DIR/admin.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$password";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
EOF
  )
}

# ---------------------------------------------------------------- storage, start, stop

# The cluster's nodes share one cluster id: the one a formatted node holds, else a new one.
cluster_id() {
  local n found
  if [[ "$TOPOLOGY" == cluster ]]; then
    for n in $(node_ids); do
      found="$(sed -n 's/^cluster.id=//p' "$ROOT/node$n/data/meta.properties" 2>/dev/null || true)"
      [[ -n "$found" ]] && { echo "$found"; return; }
    done
  fi
  new_cluster_id
}

format_storage() { # cluster-id
  if [[ -f "$DATA_DIR/meta.properties" ]]; then
    return
  fi
  local cid="$1" scram=() user
  if [[ "$TOPOLOGY" == secure ]]; then
    for user in $(secure_users); do
      scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(cat "$CLIENTS_DIR/$user.password")]")
    done
  fi
  local users=""
  [[ ${#scram[@]} -gt 0 ]] && users=", SCRAM-SHA-512 users: $(echo $(secure_users))"
  say "formatting KRaft storage in $DATA_DIR (cluster id $cid$users)"
  # A short-lived JVM: C1 only and serial GC start it ~1 s faster.
  "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
      -Dlog4j2.configurationFile="$LOG4J_CONF" -cp "$LIBS_DIR/*" \
      kafka.tools.StorageTool format -t "$cid" -c "$PROPS" "${scram[@]}" >"$NODE_DIR/format.log" 2>&1 \
    || { cat "$NODE_DIR/format.log" >&2; die "kafka-storage format failed"; }
  if [[ "$TOPOLOGY" == secure ]]; then secure_users >"$CLIENTS_DIR/scram-users"; fi
}

# Users of KAFKA_SECURE_USERS the running secured node does not hold yet (a later `up` naming more
# users, on a running node or on kept storage): their client files, and their SCRAM credentials
# through the admin API as the super user (Kafka's ConfigCommand from the jars).
add_secure_users() {
  local user added=() known="$CLIENTS_DIR/scram-users"
  for user in $(secure_users); do
    grep -qxF "$user" "$known" 2>/dev/null || added+=("$user")
  done
  (( ${#added[@]} == 0 )) && return
  [[ -f "$CLIENTS_DIR/admin.password" ]] \
    || die "the running secured node's client files are gone ($CLIENTS_DIR): 'down secure' and 'up secure' again"
  check_java
  write_clients
  for user in "${added[@]}"; do
    "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
        -Dlog4j2.configurationFile="$LOG4J_CONF" -cp "$LIBS_DIR/*" \
        kafka.admin.ConfigCommand --bootstrap-server "$KAFKA_HOST:$KAFKA_SECURE_PORT" \
        --command-config "$CLIENTS_DIR/admin.properties" --alter --entity-type users --entity-name "$user" \
        --add-config "SCRAM-SHA-512=[password=$(cat "$CLIENTS_DIR/$user.password")]" >"$NODE_DIR/users.log" 2>&1 \
      || { cat "$NODE_DIR/users.log" >&2; die "could not add user $user to the running node: 'down secure' and 'up secure' with KAFKA_SECURE_USERS naming every user"; }
    echo "$user" >>"$known"
  done
  say "added SCRAM-SHA-512 user(s) ${added[*]} to the running node (client settings in $CLIENTS_DIR)"
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
        say "a port was taken after the check; keep the ports (KAFKA_PORT, KAFKA_CONTROLLER_PORT, ...) below" \
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
  mkdir -p "$ROOT"
  exec 9>"$LOCK_FILE"
  flock -w 120 9 || die "another kafka.sh is holding $LOCK_FILE"
}

# Start the selected node's JVM (configured and formatted) in the background; its pid on stdout.
launch() {
  [[ -f "$LOG_FILE" ]] && mv -f "$LOG_FILE" "$LOG_FILE.prev"
  [[ -f "$NODE_DIR/authorizer.log" ]] && mv -f "$NODE_DIR/authorizer.log" "$NODE_DIR/authorizer.log.prev"
  rm -f "$PID_FILE"
  # `exec` keeps the pid written by the wrapper shell the pid of the JVM;
  # setsid detaches it from the caller's process group and terminal; 9>&- keeps
  # the broker from inheriting (and forever holding) our flock.
  # shellcheck disable=SC2016  # $$ and $@ are for the inner bash
  setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" \
    "$JAVA" "${HEAP_OPTS[@]}" \
    -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$NODE_DIR" \
    -cp "$LIBS_DIR/*" kafka.Kafka "$PROPS" \
    </dev/null >"$LOG_FILE" 2>&1 9>&- &
  for _ in $(seq 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
  local pid
  pid="$(tr -dc '0-9' <"$PID_FILE" 2>/dev/null || true)"
  [[ -n "$pid" ]] || die "broker did not start (no pid file); see $LOG_FILE"
  echo "$pid"
}

# ---------------------------------------------------------------- commands

cmd_up() {
  with_lock
  local n running=() stopped=()
  for n in $(node_ids); do
    select_node "$n"
    if broker_pid >/dev/null; then running+=("$n"); else stopped+=("$n"); fi
  done
  if (( ${#stopped[@]} == 0 )); then
    say "already running (node(s) ${running[*]}), checking it answers ..."
    for n in $(node_ids); do
      select_node "$n"
      wait_ready "$(broker_pid)"
    done
    if [[ "$TOPOLOGY" == secure ]]; then add_secure_users; fi
    say "ready: $(bootstrap)"
    export_line
    return
  fi
  (( ${#running[@]} == 0 )) \
    || die "$TOPOLOGY: node(s) ${running[*]} running but ${stopped[*]} not: 'start $TOPOLOGY N' each, or 'down $TOPOLOGY'"
  local p
  for p in $(topology_ports); do
    port_open "$KAFKA_HOST" "$p" \
      && die "$KAFKA_HOST:$p is already in use by another process (set the $TOPOLOGY topology's ports: deploy/kafka/README.md)"
  done
  check_java
  fetch_jars
  if [[ "$TOPOLOGY" == secure ]]; then
    select_node 1
    if [[ ! -f "$DATA_DIR/meta.properties" ]]; then
      rm -rf "$TLS_DIR" "$CLIENTS_DIR"  # new storage: a new CA and new passwords
    fi
    make_tls
    write_clients
  fi
  local cid formats=() pids=() job
  cid="$(cluster_id)"
  for n in $(node_ids); do
    select_node "$n"
    write_config
    format_storage "$cid" &
    formats+=("$!")
  done
  for job in "${formats[@]}"; do wait "$job" || exit 1; done
  for n in $(node_ids); do
    select_node "$n"
    say "starting Kafka $KAFKA_VERSION node $n on $KAFKA_HOST:$CLIENT_PORT (controller $KAFKA_HOST:$CONTROLLER_PORT), log $LOG_FILE"
    pids+=("$(launch)")
  done
  for n in $(node_ids); do
    select_node "$n"
    wait_ready "${pids[$((n - 1))]}" kill-on-timeout
  done
  if [[ "$TOPOLOGY" == secure ]]; then add_secure_users; fi
  say "ready: $(bootstrap) (pid ${pids[*]}, ${SECONDS}s)"
  export_line
}

cmd_down() {
  with_lock
  local n pid stops=() any=""
  for n in $(node_ids); do
    select_node "$n"
    if pid="$(broker_pid)"; then
      say "stopping node $n (pid $pid) ..."
      stop_pid "$pid" &
      stops+=("$!")
      any=1
    fi
  done
  for pid in "${stops[@]}"; do wait "$pid" || true; done
  for n in $(node_ids); do
    select_node "$n"
    rm -f "$PID_FILE"
    if [[ "$KAFKA_KEEP_DATA" != 1 && -d "$DATA_DIR" ]]; then
      rm -rf "$DATA_DIR"
      say "removed $DATA_DIR (KAFKA_KEEP_DATA=1 keeps it)"
    fi
  done
  if [[ "$TOPOLOGY" == secure && "$KAFKA_KEEP_DATA" != 1 ]]; then
    rm -rf "$TLS_DIR" "$CLIENTS_DIR"  # the credentials belong to the storage just removed
  fi
  if [[ -n "$any" ]]; then say "stopped"; else say "not running"; fi
}

cmd_status() {
  local n pid rss code=0 lines=()
  for n in $(node_ids); do
    select_node "$n"
    if ! pid="$(broker_pid)"; then
      lines+=("node $n stopped")
      (( code == 0 )) && code=3
      continue
    fi
    rss="$(awk '/^VmRSS/ {printf "%d MiB", $2/1024}' "/proc/$pid/status" 2>/dev/null || echo '?')"
    if metadata_ok; then
      lines+=("running pid=$pid rss=$rss version=$(cut -d' ' -f1 "$LIBS_DIR/.kafka-version" 2>/dev/null || echo '?') bootstrap=$KAFKA_HOST:$CLIENT_PORT log=$LOG_FILE")
    else
      lines+=("unhealthy pid=$pid rss=$rss (process alive, metadata request failed) log=$LOG_FILE")
      code=1
    fi
  done
  if [[ "$TOPOLOGY" == single ]]; then
    # One node: the line it always printed ("stopped" alone when it is not running).
    if [[ "$code" == 3 ]]; then echo "stopped"; else printf '%s\n' "${lines[@]}"; fi
  else
    printf "$TOPOLOGY %s\n" "${lines[@]}"
  fi
  return "$code"
}

cmd_logs() {
  select_node 1
  if [[ "${1:-}" =~ ^[0-9]+$ ]]; then select_node "$1"; shift; fi
  [[ -f "$LOG_FILE" ]] || die "no log yet at $LOG_FILE"
  if [[ $# -eq 0 ]]; then set -- -n 100; fi
  exec tail "$@" "$LOG_FILE"
}

# One node of a running topology: kill (SIGKILL, a crash), stop (SIGTERM, a controlled shutdown),
# start (again, on its data; waits until it answers). The other nodes keep running.
cmd_node() { # kill|stop|start node
  local action="$1" pid
  [[ -n "${2:-}" ]] || die "$action needs a node: $action $TOPOLOGY N"
  with_lock
  select_node "$2"
  case "$action" in
    kill)
      pid="$(broker_pid)" || die "node $NODE_ID is not running"
      kill -KILL "$pid"
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      rm -f "$PID_FILE"
      say "node $NODE_ID killed (pid $pid)" ;;
    stop)
      pid="$(broker_pid)" || die "node $NODE_ID is not running"
      stop_pid "$pid"
      rm -f "$PID_FILE"
      say "node $NODE_ID stopped (pid $pid)" ;;
    start)
      broker_pid >/dev/null && die "node $NODE_ID is already running"
      [[ -f "$DATA_DIR/meta.properties" ]] || die "node $NODE_ID has no storage: 'up $TOPOLOGY' first"
      port_open "$KAFKA_HOST" "$CLIENT_PORT" && die "$KAFKA_HOST:$CLIENT_PORT is already in use by another process"
      write_config
      say "starting node $NODE_ID again on $KAFKA_HOST:$CLIENT_PORT, log $LOG_FILE"
      pid="$(launch)"
      wait_ready "$pid" kill-on-timeout
      say "node $NODE_ID ready (pid $pid, ${SECONDS}s)" ;;
  esac
}

command="${1:-}"
[[ $# -gt 0 ]] && shift
topology=single
if [[ "${1:-}" =~ ^(single|cluster|secure)$ ]]; then topology="$1"; shift; fi
select_topology "$topology"
case "$command" in
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  status) cmd_status "$@" ;;
  logs) cmd_logs "$@" ;;
  kill|stop|start) cmd_node "$command" "$@" ;;
  *)
    echo "usage: $0 up|down|status [single|cluster|secure]" >&2
    echo "       $0 logs [single|cluster|secure [NODE]] [tail args]" >&2
    echo "       $0 kill|stop|start single|cluster|secure NODE" >&2
    exit 2
    ;;
esac
