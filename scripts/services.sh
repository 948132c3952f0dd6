#!/usr/bin/env bash
# Starts what acemq-flow's tests and `make run` need on this machine:
# RabbitMQ (127.0.0.1:5672) and PostgreSQL (127.0.0.1:5432, database "test"),
# plus the Debian packages the cross-language tests use. Installs what is
# missing when run as root with apt-get; otherwise says what to install.
set -u

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
have psql || missing+=(postgresql)
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
  missing+=(python3 python3-grpcio python3-protobuf)
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import pika' 2>/dev/null || missing+=(python3-pika)
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

# The test database and trust access for 127.0.0.1 are what the machine
# provides; create the database when a fresh cluster lacks it.
if port_open 5432 && have psql; then
  if ! psql -h 127.0.0.1 -U postgres -d test -c 'select 1' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && have runuser; then
      runuser -u postgres -- psql -c 'create database test' >/dev/null 2>&1 || true
    fi
    psql -h 127.0.0.1 -U postgres -d test -c 'select 1' >/dev/null 2>&1 ||
      { say "PostgreSQL answers but postgres@127.0.0.1/test is not reachable with trust auth"; status=1; }
  fi
fi
exit $status
