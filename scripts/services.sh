#!/usr/bin/env bash
# Starts what acemq-flow's tests and `make run` need on this machine:
# RabbitMQ (127.0.0.1:5672, with the management API on 127.0.0.1:15672, which
# the topology drift check reads) and PostgreSQL (127.0.0.1:5432, database
# "test"), plus the Debian packages the cross-language tests and the status
# page's browser test (chromium) use. Installs what is
# missing when run as root with apt-get; otherwise says what to install.
# `services.sh rabbitmq` sees to RabbitMQ alone (what `make run` needs).
set -u
ONLY="${1:-}"

say() { printf 'services: %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

APT_UPDATED=
apt_install() {
  if [ "$(id -u)" != 0 ] || ! have apt-get; then
    say "missing Debian packages: $*; install them (apt-get install $*) and run make services again"
    return 1
  fi
  if [ -z "$APT_UPDATED" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1
    APT_UPDATED=1
  fi
  say "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 ||
    { say "apt-get install $* failed"; return 1; }
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 120); do port_open "$1" && return 0; sleep 0.5; done
  return 1
}

missing=()
have rabbitmq-server || missing+=(rabbitmq-server)
if [ "$ONLY" != rabbitmq ]; then
  have pg_ctlcluster || missing+=(postgresql)
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
    missing+=(python3 python3-grpcio python3-protobuf)
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import pika' 2>/dev/null || missing+=(python3-pika)
  # The Python plugin test and test/interop import it.
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import cryptography' 2>/dev/null || missing+=(python3-cryptography)
  # runtime/admin opens the status page in headless Chromium.
  have chromium || missing+=(chromium)
fi
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}" || true; fi

status=0

# RabbitMQ
if port_open 5672; then
  say "RabbitMQ is up on 127.0.0.1:5672"
elif have rabbitmq-server; then
  say "starting RabbitMQ"
  rabbitmq-server -detached >/dev/null 2>&1 || true
  if have rabbitmqctl; then timeout 120 rabbitmqctl await_startup >/dev/null 2>&1 || true; fi
  if wait_port 5672; then say "RabbitMQ started"; else say "RabbitMQ did not start; see /var/log/rabbitmq"; status=1; fi
else
  say "RabbitMQ is not installed (apt-get install rabbitmq-server)"; status=1
fi

# The management API (127.0.0.1:15672): the topology check reads a queue's
# type, arguments and bindings there, where a refused declaration names only
# one argument. Enabling an enabled plugin changes nothing.
mgmt_up() {
  if have curl; then
    curl -fsS -o /dev/null -m 2 -u guest:guest http://127.0.0.1:15672/api/overview 2>/dev/null ||
      curl -sS -o /dev/null -m 2 http://127.0.0.1:15672/ 2>/dev/null
  else
    port_open 15672
  fi
}
if port_open 5672; then
  if mgmt_up; then
    say "RabbitMQ management is up on 127.0.0.1:15672"
  elif have rabbitmq-plugins; then
    say "enabling rabbitmq_management"
    if rabbitmq-plugins enable rabbitmq_management >/dev/null 2>&1; then
      up=
      for _ in $(seq 1 120); do mgmt_up && { up=1; break; }; sleep 0.5; done
      if [ -n "$up" ]; then say "RabbitMQ management is up on 127.0.0.1:15672"
      else say "RabbitMQ management did not answer on 127.0.0.1:15672; see /var/log/rabbitmq"; status=1; fi
    else
      say "rabbitmq-plugins enable rabbitmq_management failed; run it as root"; status=1
    fi
  else
    say "rabbitmq-plugins is not installed; enable rabbitmq_management on the broker"; status=1
  fi
fi

[ "$ONLY" = rabbitmq ] && exit $status

# PostgreSQL
if port_open 5432; then
  say "PostgreSQL is up on 127.0.0.1:5432"
elif have pg_ctlcluster && [ -d /etc/postgresql ]; then
  say "starting PostgreSQL"
  for v in $(ls /etc/postgresql); do
    pg_ctlcluster --skip-systemctl-redirect "$v" main start >/dev/null 2>&1 || true
  done
  if wait_port 5432; then say "PostgreSQL started"; else say "PostgreSQL did not start"; status=1; fi
else
  say "PostgreSQL is not installed (apt-get install postgresql)"; status=1
fi

# The tests' database: role acemq (password acemq, no superuser) with
# database "test", where it may create the schemas each test works in. As
# root the script creates what is missing through the postgres account (peer
# authentication on the local socket), so a fresh Debian cluster, which asks
# for a password on TCP, works as it is; a cluster that trusts 127.0.0.1
# ignores the password.
# A database of your own in ACEMQ_TEST_POSTGRES_URL is only checked.
DEFAULT_PG_URL="postgres://acemq:acemq@127.0.0.1:5432/test?sslmode=disable"
PG_TEST_URL="${ACEMQ_TEST_POSTGRES_URL:-$DEFAULT_PG_URL}"
if port_open 5432 && have psql; then
  if ! psql "$PG_TEST_URL" -c 'select 1' >/dev/null 2>&1; then
    if [ "$PG_TEST_URL" = "$DEFAULT_PG_URL" ] && [ "$(id -u)" = 0 ] && have runuser; then
      pg() { runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 "$@" >/dev/null 2>&1; }
      pg -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'acemq') THEN CREATE ROLE acemq; END IF; END \$\$" &&
        pg -c "ALTER ROLE acemq LOGIN PASSWORD 'acemq'" ||
        say "could not create the PostgreSQL role acemq"
      runuser -u postgres -- psql -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null | grep -q 1 ||
        pg -c 'CREATE DATABASE test' || say "could not create the PostgreSQL database test"
      pg -c 'GRANT CONNECT, CREATE ON DATABASE test TO acemq' || say "could not grant acemq access to database test"
    fi
    psql "$PG_TEST_URL" -c 'select 1' >/dev/null 2>&1 ||
      { say "PostgreSQL answers but the tests' database is not reachable; run make services as root, or point ACEMQ_TEST_POSTGRES_URL at a database where you may create schemas"; status=1; }
  fi
fi

# The services' own TLS listeners, with a test CA (test/tls): RabbitMQ on
# 127.0.0.1:5671, PostgreSQL's certificate; neither restarts.
"$(dirname "$0")/services-tls.sh" || status=1
exit $status
