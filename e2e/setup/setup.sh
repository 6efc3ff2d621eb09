#!/usr/bin/env bash
# setup.sh - install everything e2e/harness needs to start its servers, on Debian 12, as root.
#
# Idempotent: each step checks first and does nothing when its result is already there, so a
# run on a ready machine takes well under two seconds. Network: the Debian mirror (apt) and
# Maven Central (mvn) only.
#
# What it installs:
#   apt     mariadb-server mariadb-client redis-server, postgresql-15 when
#           /usr/lib/postgresql/15/bin/postgres is missing, Java 17 and Maven when missing
#   users   'postgres' (runs PostgreSQL) and 'sluice' (runs Elasticsearch): both servers refuse root
#   cache   $SLUICE_CACHE (default /var/cache/sluice; must be readable by 'sluice'):
#             elasticsearch/  the Elasticsearch integ-test distribution, unzipped
#             kafka/libs/     Apache Kafka and its runtime dependencies (jars)
#   cleanup temp dirs /tmp/sluice-harness-* left by test processes that were killed, and any
#           server process still running inside one of them
#
# Environment: SLUICE_CACHE (cache dir), SLUICE_SETUP_QUIET=1 (no progress lines).
set -euo pipefail

ES_VERSION=8.19.21
KAFKA_VERSION=4.4.0
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
CACHE="${SLUICE_CACHE:-/var/cache/sluice}"
RUN_USER=sluice
PG_BIN=/usr/lib/postgresql/15/bin

log() { [ "${SLUICE_SETUP_QUIET:-0}" = 1 ] || echo "setup: $*" >&2; }
die() { echo "setup: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and creates system users)"

# --- apt -------------------------------------------------------------------------------
apt_pkgs=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
have mariadbd || apt_pkgs+=(mariadb-server)
have mariadb-install-db || apt_pkgs+=(mariadb-server)
have mariadb || apt_pkgs+=(mariadb-client)
have redis-server || apt_pkgs+=(redis-server)
[ -x "$PG_BIN/postgres" ] || apt_pkgs+=(postgresql-15 postgresql-client-15)
[ -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ] || apt_pkgs+=(openjdk-17-jdk-headless)
have mvn || apt_pkgs+=(maven)
have unzip || apt_pkgs+=(unzip)

if [ "${#apt_pkgs[@]}" -gt 0 ]; then
  # dedupe, keep order
  mapfile -t apt_pkgs < <(printf '%s\n' "${apt_pkgs[@]}" | awk '!seen[$0]++')
  log "apt-get install ${apt_pkgs[*]}"
  made_policy=0
  # policy-rc.d exit 101: apt must not start the distribution's own services
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >&2
  if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# --- users -----------------------------------------------------------------------------
for u in postgres "$RUN_USER"; do
  if ! id -u "$u" >/dev/null 2>&1; then
    log "creating system user $u"
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$u"
  fi
done

# --- Maven artifacts -------------------------------------------------------------------
mkdir -p "$CACHE"
chmod 0755 "$CACHE"
M2="$CACHE/m2"
# quiet, and without the colour codes Maven 3.8 prints even in batch mode
mvn_() { mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$M2" "$@" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >&2; }

es_dir="$CACHE/elasticsearch-$ES_VERSION"
if [ ! -f "$es_dir/.complete" ]; then
  log "fetching Elasticsearch $ES_VERSION (integ-test-zip) from Maven Central"
  mvn_ "$DEP_PLUGIN:get" -Dtransitive=false \
    -Dartifact="org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip"
  zip="$M2/org/elasticsearch/distribution/integ-test-zip/elasticsearch/$ES_VERSION/elasticsearch-$ES_VERSION.zip"
  [ -f "$zip" ] || die "maven did not leave $zip"
  tmp="$CACHE/.unzip.$$"
  rm -rf "$tmp" "$es_dir"
  mkdir -p "$tmp"
  unzip -q "$zip" -d "$tmp"
  mv "$tmp/elasticsearch-$ES_VERSION" "$es_dir"
  rm -rf "$tmp"
  chmod -R a+rX "$es_dir"
  touch "$es_dir/.complete"
fi
ln -sfn "elasticsearch-$ES_VERSION" "$CACHE/elasticsearch"

kafka_dir="$CACHE/kafka-$KAFKA_VERSION"
if [ ! -f "$kafka_dir/.complete" ]; then
  log "fetching Apache Kafka $KAFKA_VERSION and its dependencies from Maven Central"
  rm -rf "$kafka_dir"
  mkdir -p "$kafka_dir"
  # a throw-away project whose runtime classpath is the broker's: kafka_2.13 pulls in the
  # server, raft, metadata, storage and the StorageTool; log4j-slf4j-impl is the log binding
  cat > "$kafka_dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sluice.e2e</groupId>
  <artifactId>kafka-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>2.25.3</version>
    </dependency>
  </dependencies>
</project>
EOF
  mvn_ -f "$kafka_dir/pom.xml" "$DEP_PLUGIN:copy-dependencies" \
    -DincludeScope=runtime -DoutputDirectory="$kafka_dir/libs"
  ls "$kafka_dir/libs"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null \
    || die "maven did not copy kafka_2.13-$KAFKA_VERSION.jar into $kafka_dir/libs"
  chmod -R a+rX "$kafka_dir"
  touch "$kafka_dir/.complete"
fi
ln -sfn "kafka-$KAFKA_VERSION" "$CACHE/kafka"

# --- stale temp dirs -------------------------------------------------------------------
# Each harness dir holds a file 'owner' with "<pid> <start time>" of the test process that made
# it. When that process is gone, the dir and every process whose command line names it are
# leftovers of a killed test run.
tmp_root="${TMPDIR:-/tmp}"
stale=()
for d in "$tmp_root"/sluice-harness-*; do
  [ -d "$d" ] || continue
  read -r opid ostart < "$d/owner" 2>/dev/null || { opid=""; ostart=""; }
  # alive = same pid, same start time (not a later process reusing the pid), not a zombie
  if [ -n "$opid" ] && [ -r "/proc/$opid/stat" ] \
     && [ "$(sed 's/.*) //' "/proc/$opid/stat" 2>/dev/null | awk '$1 != "Z" {print $20}')" = "$ostart" ]; then
    continue # owner still running
  fi
  # an 'owner' file not yet written: a harness in the middle of creating the dir
  if [ -z "$opid" ] && [ "$(( $(date +%s) - $(stat -c %Y "$d") ))" -lt 60 ]; then continue; fi
  stale+=("$d")
done
if [ "${#stale[@]}" -gt 0 ]; then
  killed=()
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    [ "$pid" = "$$" ] && continue
    cwd="$(readlink "$p/cwd" 2>/dev/null || true)"
    cmd="$(tr '\0' ' ' 2>/dev/null < "$p/cmdline" || true)"
    for d in "${stale[@]}"; do
      if [ "$cwd" = "$d" ] || [[ "$cwd" == "$d/"* ]] || [[ "$cmd" == *"$d"* ]]; then
        log "killing leftover server pid $pid in $d"
        kill -KILL "$pid" 2>/dev/null || true
        killed+=("$pid")
      fi
    done
  done
  # wait (up to 5 s) until they are gone: PostgreSQL's segment stays while one is attached
  for _ in $(seq 1 50); do
    left=0
    for pid in "${killed[@]}"; do [ -e "/proc/$pid" ] && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for d in "${stale[@]}"; do
    # a killed postmaster leaves its System V segment behind: line 7 of postmaster.pid is
    # "<key> <id>"; remove it when nothing is attached
    if [ -f "$d/data/postmaster.pid" ]; then
      shmid="$(sed -n 7p "$d/data/postmaster.pid" | awk '{print $2}')"
      if [ -n "$shmid" ] && ipcs -m -i "$shmid" 2>/dev/null | grep -q 'nattch=0'; then
        ipcrm -m "$shmid" 2>/dev/null || true
      fi
    fi
    log "removing stale $d"
    rm -rf "$d"
  done
fi

log "ready (cache $CACHE)"
