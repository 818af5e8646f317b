"""Earlier releases of recurrence, built from git: the writers of the upgrade fixtures and the old worker
of the rolling-upgrade test.

A release is a commit. ``git archive`` of it is built into a wheel (pip, as ``tests/product/test_wheel.py``
builds today's) and installed without its dependencies into ``.cache/releases/<commit>/lib``; it
runs on this venv's interpreter with that folder first on ``PYTHONPATH``, so it shares this venv's
dependencies. That holds while the release declares the dependencies this checkout declares (built
otherwise, it would run on versions it was never tested with), and ``build`` refuses a release that
does not. ``make releases`` builds the ones the tests use; ``python -m devkit.releases REF`` any other.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .localrun import REPO

CACHE = REPO / ".cache" / "releases"
#: The release before this one (1.0.0 at 44f59ac, state format 2): the old worker of the rolling-upgrade test, and
#: the writer of its fixture. Move it forward when a release is made (docs/upgrading.md, "Making a release").
PREVIOUS = "44f59ac9e0c68f68a3323f91bb63e9ee52665812"


class ReleaseUnavailableError(RuntimeError):
    """The release cannot be built here (no git history of it, or other dependencies)."""


@dataclass(frozen=True)
class Release:
    commit: str
    path: Path

    @property
    def lib(self) -> Path:
        return self.path / "lib"

    @property
    def version(self) -> str:
        """The version its pyproject declares (an early release run from its tree has no metadata)."""
        return (self.path / ".version").read_text().strip()

    @property
    def package(self) -> str:
        """Its import name: ``recurrence`` up to 1.0.0, ``recurrence_ledger`` since (decision 94)."""
        return "recurrence_ledger" if (self.lib / "recurrence_ledger").is_dir() else "recurrence"

    def command(self) -> list[str]:
        return [sys.executable, "-m", f"{self.package}.processor.cli"]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (this process's environment by default) with the release first on the import path."""
        env = dict(os.environ if base is None else base)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.lib), env.get("PYTHONPATH", "")) if p)
        return env

    def run(
        self, *args: str | Path, check: bool = True, env: dict[str, str] | None = None
    ) -> "subprocess.CompletedProcess[str]":
        """The release's CLI with ``args``; ``env``: the environment to start from (this process's)."""
        done = subprocess.run(
            [*self.command(), *map(str, args)],
            env=self.env(env),
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"recurrence {self.commit[:12]} {args} exited {done.returncode}: {done.stderr[-2000:]}"
            )
        return done


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ReleaseUnavailableError(f"git {' '.join(args)}: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def resolve(ref: str) -> str:
    return _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def _dependencies(pyproject: bytes) -> list[str]:
    return sorted(tomllib.loads(pyproject.decode())["project"]["dependencies"])


def build(ref: str) -> Release:
    """The release at ``ref``, built into ``.cache/releases`` the first time (a few seconds)."""
    try:
        commit = resolve(ref)
    except ReleaseUnavailableError as missing:
        raise ReleaseUnavailableError(f"{ref} is not in this clone's history (a shallow clone?): {missing}") from None
    release = Release(commit, CACHE / commit)
    if (release.path / ".installed").exists():
        return release
    theirs = _dependencies(_git("show", f"{commit}:pyproject.toml").encode())
    ours = _dependencies((REPO / "pyproject.toml").read_bytes())
    if theirs != ours:
        raise ReleaseUnavailableError(f"{commit[:12]} declares other dependencies than this checkout: {theirs}")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        work = Path(scratch)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
        source = work / "source"
        source.mkdir()
        archive_path = work / "source.tar"
        archive_path.write_bytes(archive)
        with tarfile.open(archive_path) as tar:
            tar.extractall(source, filter="tar")
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "wheel", "--no-deps", str(source), "-w", str(work / "wheel")], check=True)
        wheel = next((work / "wheel").glob("recurrence*.whl"))  # recurrence-1.0.0, recurrence_ledger-1.1.0
        staged = Release(commit, work / "release")
        subprocess.run([*pip, "install", "--no-deps", "--target", str(staged.lib), str(wheel)], check=True)
        if staged.run("--version", check=False).returncode != 0:
            # Early wheels listed their packages by hand and missed some (78d47b4's has no processor/store):
            # the packages as its pyproject maps them onto the source tree instead.
            shutil.rmtree(staged.lib)
            _lay_out(source, staged.lib)
            staged.run("--version")
        project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
        (staged.path / ".version").write_text(project["version"])
        (staged.path / ".installed").write_text(f"{commit}\n")
        shutil.rmtree(release.path, ignore_errors=True)
        try:
            os.rename(staged.path, release.path)
        except OSError:
            if not (release.path / ".installed").exists():
                raise  # not another process's build of the same release that landed first
    return release


def _lay_out(source: Path, lib: Path) -> None:
    """Copy the packages of a source tree where setuptools' ``package-dir`` puts them (parents first)."""
    setuptools = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    for package, folder in sorted(mapping.items(), key=lambda item: item[0].count(".")):
        target = lib.joinpath(*package.split("."))
        shutil.copytree(
            source / folder, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="build earlier releases of recurrence into .cache/releases")
    parser.add_argument("refs", nargs="*", default=[PREVIOUS], help="git refs (default: the previous release)")
    for ref in parser.parse_args().refs:
        try:
            release = build(ref)
        except ReleaseUnavailableError as missing:
            sys.exit(f"releases: {missing}")
        print(f"{ref}: recurrence {release.version} in {release.path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
