# Shared by Rudder's scripts: installing system packages and starting throw-away test services.
# Source it; it defines functions only.

# Installs the Debian packages given, if any is missing.
rudder_install_packages() {
  local missing=()
  for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "==> installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Installs the given PyPI packages for the `python3` on PATH, each one that it cannot import
# (the import name is the package name). Plain `pip install` first (a pyenv or virtualenv
# python); Debian's system python refuses that (PEP 668), so then with
# --break-system-packages (and --user when not root).
rudder_install_python_packages() {
  local missing=()
  for package in "$@"; do
    python3 -c "import $package" >/dev/null 2>&1 || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "==> pip installing ${missing[*]}"
  if ! python3 -m pip install --quiet "${missing[@]}" 2>/dev/null; then
    local user=()
    [ "$(id -u)" -eq 0 ] || user=(--user)
    python3 -m pip install --quiet --break-system-packages "${user[@]}" "${missing[@]}"
  fi
}

# Prints a free TCP port on 127.0.0.1.
rudder_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Starts a throw-away etcd member; sets RUDDER_ETCD_ENDPOINT, RUDDER_ETCD_PID, RUDDER_ETCD_DIR.
rudder_start_etcd() {
  RUDDER_ETCD_DIR=$(mktemp -d /tmp/rudder-etcd.XXXXXX)
  local client peer
  client=$(rudder_free_port)
  peer=$(rudder_free_port)
  etcd --name rudder-test --data-dir "$RUDDER_ETCD_DIR/data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "rudder-test=http://127.0.0.1:$peer" >"$RUDDER_ETCD_DIR/etcd.log" 2>&1 &
  RUDDER_ETCD_PID=$!
  RUDDER_ETCD_ENDPOINT="127.0.0.1:$client"
  for _ in $(seq 1 100); do
    if ETCDCTL_API=3 etcdctl --endpoints "$RUDDER_ETCD_ENDPOINT" endpoint health >/dev/null 2>&1; then
      echo "==> etcd $(etcd --version | head -1 | awk '{print $3}') on $RUDDER_ETCD_ENDPOINT"
      return 0
    fi
    sleep 0.1
  done
  echo "etcd did not become healthy; its log:" >&2
  cat "$RUDDER_ETCD_DIR/etcd.log" >&2
  return 1
}

rudder_stop_etcd() {
  if [ -n "${RUDDER_ETCD_PID:-}" ]; then
    kill "$RUDDER_ETCD_PID" 2>/dev/null || true
    wait "$RUDDER_ETCD_PID" 2>/dev/null || true
  fi
  if [ -n "${RUDDER_ETCD_DIR:-}" ]; then rm -rf "$RUDDER_ETCD_DIR"; fi
  RUDDER_ETCD_PID=""
  RUDDER_ETCD_DIR=""
}

# Starts a throw-away Cloud Spanner emulator (it ships with the Google Cloud SDK on these
# machines) on a free port; sets RUDDER_SPANNER_EMULATOR (host:port).
rudder_start_spanner() {
  local emulator=/usr/lib/google-cloud-sdk/bin/cloud_spanner_emulator/emulator_main port
  if [ ! -x "$emulator" ]; then
    echo "no Cloud Spanner emulator at $emulator (install the Google Cloud SDK's cloud-spanner-emulator component)" >&2
    return 1
  fi
  port=$(rudder_free_port)
  RUDDER_SPANNER_LOG=$(mktemp /tmp/rudder-spanner.XXXXXX)
  "$emulator" --host_port "127.0.0.1:$port" >"$RUDDER_SPANNER_LOG" 2>&1 &
  RUDDER_SPANNER_PID=$!
  RUDDER_SPANNER_EMULATOR="127.0.0.1:$port"
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "==> Cloud Spanner emulator on $RUDDER_SPANNER_EMULATOR"
      return 0
    fi
    sleep 0.1
  done
  echo "the Cloud Spanner emulator did not start; its log:" >&2
  cat "$RUDDER_SPANNER_LOG" >&2
  return 1
}

rudder_stop_spanner() {
  if [ -n "${RUDDER_SPANNER_PID:-}" ]; then
    kill "$RUDDER_SPANNER_PID" 2>/dev/null || true
    wait "$RUDDER_SPANNER_PID" 2>/dev/null || true
  fi
  if [ -n "${RUDDER_SPANNER_LOG:-}" ]; then rm -f "$RUDDER_SPANNER_LOG"; fi
  RUDDER_SPANNER_PID=""
  RUDDER_SPANNER_LOG=""
}

# Stops what rudder_start_etcd / rudder_start_postgres / rudder_start_spanner started and exits
# with the status given as its argument, else the one it finds: use as
# `trap rudder_stop_services EXIT`, or `trap '…; rudder_stop_services "$rc"' EXIT`.
rudder_stop_services() {
  local status=${1:-$?}
  rudder_stop_etcd
  rudder_stop_spanner
  rudder_stop_postgres
  exit "$status"
}

# Finds a PostgreSQL to use: the one answering on 127.0.0.1:5432 (as user postgres, trust
# auth), else a throw-away cluster of our own. Sets RUDDER_POSTGRES_URL (and RUDDER_PG_DIR when
# we started one).
rudder_start_postgres() {
  local database=rudder_test
  if pg_isready -q -h 127.0.0.1 -p 5432 && psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
    psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname = '$database'" | grep -q 1 ||
      psql -h 127.0.0.1 -U postgres -d postgres -qc "create database $database" >/dev/null
    RUDDER_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/$database"
    echo "==> using the PostgreSQL on 127.0.0.1:5432"
    return 0
  fi
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$bin" ]; then
    rudder_install_packages postgresql
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  local port
  port=$(rudder_free_port)
  RUDDER_PG_DIR=$(mktemp -d /tmp/rudder-pg.XXXXXX)
  chown postgres "$RUDDER_PG_DIR"
  runuser -u postgres -- "$bin/initdb" -D "$RUDDER_PG_DIR/data" -U postgres --auth=trust >/dev/null
  runuser -u postgres -- "$bin/pg_ctl" -D "$RUDDER_PG_DIR/data" -l "$RUDDER_PG_DIR/log" -w \
    -o "-p $port -k $RUDDER_PG_DIR -c listen_addresses=127.0.0.1" start >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "create database $database" >/dev/null
  RUDDER_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/$database"
  echo "==> started a throw-away PostgreSQL on 127.0.0.1:$port"
}

rudder_stop_postgres() {
  if [ -n "${RUDDER_PG_DIR:-}" ]; then
    local bin
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    runuser -u postgres -- "$bin/pg_ctl" -D "$RUDDER_PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$RUDDER_PG_DIR"
    RUDDER_PG_DIR=""
  fi
  return 0
}

# Finds the MySQL/MariaDB to test the mysql driver against: the one answering on
# 127.0.0.1:3306 as root with an empty password; else installs mariadb-server, starts it and
# lets root in from 127.0.0.1 without a password (Debian's root authenticates by unix socket
# only). It is the machine's service, left running. Sets RUDDER_MYSQL_URL.
rudder_start_mysql() {
  local client=mariadb
  command -v mariadb >/dev/null 2>&1 || client=mysql
  if command -v "$client" >/dev/null 2>&1 &&
    "$client" -h 127.0.0.1 -P 3306 -u root -e 'select 1' >/dev/null 2>&1; then
    RUDDER_MYSQL_URL="mysql://root@127.0.0.1:3306/test"
    "$client" -h 127.0.0.1 -P 3306 -u root -e 'create database if not exists test' >/dev/null
    echo "==> using the MariaDB/MySQL on 127.0.0.1:3306"
    return 0
  fi
  rudder_install_packages mariadb-server mariadb-client
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # Debian's init script when there is one; else the way these machines start their MariaDB
  # (a CI run once found it stopped, with no `mysql` service to fall back on).
  if ! $sudo service mariadb start >/dev/null 2>&1; then
    $sudo start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >/dev/null
  fi
  local up=""
  for _ in $(seq 1 150); do
    if $sudo mariadb -u root -e 'select 1' >/dev/null 2>&1; then
      up=yes
      break
    fi
    sleep 0.2
  done
  if [ -z "$up" ]; then
    echo "MariaDB did not answer within 30 s of starting it; its log says:" >&2
    tail -20 /var/log/mysql/error.log 2>/dev/null >&2 || true
    return 1
  fi
  $sudo mariadb -u root -e "create user if not exists 'root'@'127.0.0.1' identified by '';
    grant all privileges on *.* to 'root'@'127.0.0.1' with grant option;
    create database if not exists test" >/dev/null
  mariadb -h 127.0.0.1 -P 3306 -u root -e 'select 1' >/dev/null
  RUDDER_MYSQL_URL="mysql://root@127.0.0.1:3306/test"
  echo "==> started the machine's MariaDB on 127.0.0.1:3306"
}

# Cargo builds go to a target dir outside the clone, so CI runs reuse earlier builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/rudder-target}"
# CI builds a fresh clone, whose crates never reuse incremental state: skip writing it.
if [ "${CI:-}" = "true" ]; then
  export CARGO_INCREMENTAL=0
fi

# A full disk kills a build half-way through linking (a CI run once died of it). When less than
# 8 GB is free where the target dir lives, its old builds go first: a cold build beats a failed one.
rudder_make_disk_room() {
  local dir="$CARGO_TARGET_DIR" probe free_kb
  probe="$dir"
  [ -d "$probe" ] || probe=$(dirname "$dir")
  # CI builds without incremental state; what earlier sessions left of it is only weight.
  if [ "${CI:-}" = "true" ] && [ -d "$dir/debug/incremental" ]; then
    rm -rf "$dir/debug/incremental"
  fi
  free_kb=$(df -Pk "$probe" | awk 'NR == 2 { print $4 }')
  if [ -d "$dir" ] && [ "${free_kb:-0}" -lt $((8 * 1024 * 1024)) ]; then
    echo "==> only $((free_kb / 1024)) MB free: removing the old builds in $dir"
    rm -rf "$dir"
    free_kb=$(df -Pk "$probe" | awk 'NR == 2 { print $4 }')
  fi
  if [ "${free_kb:-0}" -lt $((4 * 1024 * 1024)) ]; then
    echo "==> warning: only $((free_kb / 1024)) MB free for the build; it needs about 4 GB" >&2
  fi
  return 0
}
