#!/usr/bin/env bash
# The TLS listeners of the local services, for test/tls's
# TestServicesOwnTLSListeners (scripts/services.sh runs this as root):
#   - a test CA, and certificates it signs for the services (localhost and
#     127.0.0.1) and for a client (CN acemq-flow-client), in $TLS_DIR
#     (/var/lib/acemq-flow/tls; ca.pem, client.pem, client-key.pem are what
#     a client needs), made once and kept;
#   - RabbitMQ: an AMQPS listener on 127.0.0.1:5671 asking for a client
#     certificate (listeners.ssl.default and ssl_options in rabbitmq.conf,
#     read at the next start); a running broker gets the same listener
#     started in place (rabbitmqctl eval), so nothing restarts;
#   - PostgreSQL: the certificate signed by the test CA instead of Debian's
#     snakeoil, and the CA for client certificates (conf.d/acemq-tls.conf),
#     applied by a reload, which keeps every connection.
# Nothing here turns plain connections off: 5672 and sslmode=disable work
# as before.
set -u
say() { printf 'services: %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

TLS_DIR="${ACEMQ_TEST_TLS_DIR:-/var/lib/acemq-flow/tls}"
if [ "$(id -u)" != 0 ]; then
  say "TLS listeners: run make services as root to configure them (RabbitMQ 5671, PostgreSQL ssl)"
  exit 0
fi
have openssl || { say "TLS listeners: openssl is missing (apt-get install openssl)"; exit 1; }
status=0

# The certificates, made once: a CA for ten years, P-256 keys.
if [ ! -s "$TLS_DIR/ca.pem" ] || [ ! -s "$TLS_DIR/server.pem" ] || [ ! -s "$TLS_DIR/client.pem" ]; then
  say "making the test CA and certificates in $TLS_DIR"
  mkdir -p "$TLS_DIR" && chmod 755 "$TLS_DIR"
  (
    set -e
    cd "$TLS_DIR"
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
    key ca-key.pem
    openssl req -x509 -new -key ca-key.pem -out ca.pem -days 3650 -subj "/CN=acemq-flow test services CA" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    leaf() { # leaf NAME CN EXTENSIONS
      key "$1-key.pem"
      openssl req -new -key "$1-key.pem" -out "$1.csr" -subj "/CN=$2"
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out "$1.pem" -days 3650 -extfile "$1.ext" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    leaf server localhost $'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature'
    leaf client acemq-flow-client $'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature'
    chmod 600 ca-key.pem
    chmod 644 ca.pem server.pem client.pem
    chmod 600 client-key.pem # libpq refuses a key others can read
    # Each service reads its key as itself, and PostgreSQL refuses a key
    # others can read.
    install -m 600 -o rabbitmq -g rabbitmq server-key.pem rabbitmq-key.pem 2>/dev/null || cp server-key.pem rabbitmq-key.pem
    install -m 600 -o postgres -g postgres server-key.pem postgres-key.pem 2>/dev/null || cp server-key.pem postgres-key.pem
    rm -f server-key.pem
  ) || { say "could not make the test certificates in $TLS_DIR"; exit 1; }
fi

# RabbitMQ
if [ -d /etc/rabbitmq ]; then
  conf=/etc/rabbitmq/rabbitmq.conf
  if ! grep -q '^listeners.ssl.default' "$conf" 2>/dev/null; then
    say "adding the AMQPS listener 127.0.0.1:5671 to $conf (read at the next start)"
    cat >>"$conf" <<EOF
# acemq-flow's tests (scripts/services-tls.sh): AMQPS with a client certificate
listeners.ssl.default = 127.0.0.1:5671
ssl_options.cacertfile = $TLS_DIR/ca.pem
ssl_options.certfile = $TLS_DIR/server.pem
ssl_options.keyfile = $TLS_DIR/rabbitmq-key.pem
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
EOF
  fi
  if port_open 5672 && ! port_open 5671 && have rabbitmqctl; then
    say "starting the AMQPS listener 127.0.0.1:5671 in the running broker"
    timeout 30 rabbitmqctl eval "rabbit_networking:start_ssl_listener({\"127.0.0.1\", 5671}, [{cacertfile, \"$TLS_DIR/ca.pem\"}, {certfile, \"$TLS_DIR/server.pem\"}, {keyfile, \"$TLS_DIR/rabbitmq-key.pem\"}, {verify, verify_peer}, {fail_if_no_peer_cert, true}], 1)." >/dev/null 2>&1 || true
  fi
  if port_open 5672; then
    for _ in $(seq 1 20); do port_open 5671 && break; sleep 0.5; done
    if port_open 5671; then say "RabbitMQ AMQPS is up on 127.0.0.1:5671"
    else say "RabbitMQ has no AMQPS listener on 127.0.0.1:5671; see /var/log/rabbitmq"; status=1; fi
  fi
fi

# PostgreSQL
for d in /etc/postgresql/*/main; do
  [ -d "$d/conf.d" ] || continue
  conf="$d/conf.d/acemq-tls.conf"
  want="# acemq-flow's tests (scripts/services-tls.sh): the test CA's certificate
ssl = on
ssl_cert_file = '$TLS_DIR/server.pem'
ssl_key_file = '$TLS_DIR/postgres-key.pem'
ssl_ca_file = '$TLS_DIR/ca.pem'"
  if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    say "PostgreSQL: TLS with the test CA's certificate ($conf)"
    printf '%s\n' "$want" >"$conf"
    v="$(basename "$(dirname "$d")")"
    if port_open 5432; then
      pg_ctlcluster --skip-systemctl-redirect "$v" main reload >/dev/null 2>&1 ||
        { say "PostgreSQL $v did not reload its TLS settings"; status=1; }
    fi
  fi
done
exit $status
