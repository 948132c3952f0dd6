#!/usr/bin/python3
"""An acemq-flow plugin in Python: serves the handlers "echo" (returns its input)
and "undo" (a saga compensation: it reads what its own step returned).

It speaks the protocol plugins/README.md documents, without the Go SDK:
  1. check the magic cookie and the protocol version the host offers;
  2. with AutoMTLS (PLUGIN_CLIENT_CERT set), make a one-off certificate, trust
     only the host's certificate, and require it from every connection;
  3. serve acemq.plugin.v1.Plugin, grpc.health.v1.Health ("plugin": SERVING)
     and plugin.GRPCController/Shutdown on a loopback port;
  4. print the handshake line on stdout.

The Plugin service is registered with grpc's generic handlers over the message
classes protoc generates (plugin_pb2.py, from plugins/proto/plugin.proto by
scripts/generate.sh), so only Debian's python3-grpcio, python3-protobuf and
python3-cryptography are needed.
"""

import base64
import concurrent.futures
import datetime
import json
import os
import queue
import sys
import threading

import grpc

import plugin_pb2 as pb

MAGIC_COOKIE_KEY = "ACEMQ_FLOW_PLUGIN"
MAGIC_COOKIE_VALUE = "8f3c1e0a4b7d4e2a9c6b5d1f0e7a3c92"
PROTOCOL_VERSION = 1
CORE_PROTOCOL_VERSION = 1


def log(level, message, **kv):
    """Writes one go-plugin JSON log line on stderr; the host logs it at its level."""
    now = datetime.datetime.now(datetime.timezone.utc)
    rec = {"@level": level, "@message": message,
           "@timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")}
    rec.update(kv)
    sys.stderr.write(json.dumps(rec) + "\n")
    sys.stderr.flush()


# The handlers: name -> (input type, output type, function(request) -> bytes or None).
# Returning None means "nothing": the run stops at this step. Raising
# Retryable or Fatal reports a failure of that kind.
class Fatal(Exception):
    pass


def echo(req):
    return req.payload


def undo(req):
    """A saga step's compensation. req.payload is the saga's input, as every
    step gets it; req.step_output is what the compensated step returned (empty
    when it returned nothing). The envelope says which queue the message came
    from and when the runtime received it (both unset from a runtime older than
    those fields). The runtime ignores what a compensation returns; this one
    returns what it saw, so that a test can read it back."""
    if not req.compensate:
        raise Fatal("undo is a compensation: bind it to a saga step's compensate, not its handler")
    step = json.loads(req.step_output) if req.step_output else None
    env = req.envelope
    received = None
    if env.HasField("received_at"):
        received = env.received_at.ToDatetime(tzinfo=datetime.timezone.utc).isoformat()
    log("info", "undoing", step_output=step, queue=env.queue, message_id=env.message_id)
    return json.dumps({"undid": step, "input": json.loads(req.payload or b"null"),
                       "queue": env.queue, "received_at": received}).encode()


HANDLERS = {"echo": ("", "", echo), "undo": ("", "", undo)}


def describe(_request, _context):
    return pb.DescribeResponse(handlers=[
        pb.HandlerInfo(name=name, input_type=i, output_type=o)
        for name, (i, o, _) in sorted(HANDLERS.items())])


def handle(call):
    resp = pb.HandleResponse(call_id=call.call_id)
    entry = HANDLERS.get(call.handler)
    if entry is None:
        resp.failure.fatal = True
        resp.failure.message = "this plugin has no handler %r; it serves: %s" % (
            call.handler, ", ".join(sorted(HANDLERS)))
        return resp
    try:
        out = entry[2](call)
    except Fatal as e:
        resp.failure.fatal = True
        resp.failure.message = str(e)
    except Exception as e:  # anything else is worth a retry
        resp.failure.fatal = False
        resp.failure.message = "%s: %s" % (type(e).__name__, e)
    else:
        if out is None:
            resp.stop.SetInParent()
        else:
            resp.output.payload = out
    return resp


POOL = concurrent.futures.ThreadPoolExecutor(max_workers=32)


def calls(request_iterator, context):
    """The call stream: answers each HandleRequest, in any order, batched."""
    answers = queue.Queue()
    done = object()

    def read():
        futures = []
        try:
            for batch in request_iterator:
                for call in batch.calls:
                    futures.append(POOL.submit(lambda c=call: answers.put(handle(c))))
                # Cancellation (batch.cancel) needs no work here: handlers
                # are short and their answers are dropped by the host.
        except grpc.RpcError:
            pass
        concurrent.futures.wait(futures)
        answers.put(done)

    threading.Thread(target=read, daemon=True).start()
    while True:
        first = answers.get()
        if first is done:
            return
        batch = pb.ResultBatch(results=[first])
        while True:
            try:
                more = answers.get_nowait()
            except queue.Empty:
                break
            if more is done:
                yield batch
                return
            batch.results.append(more)
        yield batch


def health_check(_request_bytes, _context):
    # grpc.health.v1.HealthCheckResponse{status: SERVING}: field 1, varint 1.
    return b"\x08\x01"


def main():
    if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        sys.stderr.write("This is an acemq-flow plugin: the acemq-flow runtime starts it. "
                         "It is not meant to be run by hand.\n")
        sys.exit(1)
    offered = os.environ.get("PLUGIN_PROTOCOL_VERSIONS", "").split(",")
    if str(PROTOCOL_VERSION) not in offered:
        sys.stderr.write("acemq-flow plugin protocol %d is not among those the host offers (%s)\n"
                         % (PROTOCOL_VERSION, ",".join(offered)))
        sys.exit(1)

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.max_receive_message_length", -1),
                                  ("grpc.max_send_message_length", -1)])
    identity = lambda b: b
    stopped = threading.Event()

    def shutdown(_request_bytes, _context):
        stopped.set()
        return b""

    server.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("acemq.plugin.v1.Plugin", {
            "Describe": grpc.unary_unary_rpc_method_handler(
                describe, request_deserializer=pb.DescribeRequest.FromString,
                response_serializer=pb.DescribeResponse.SerializeToString),
            "Calls": grpc.stream_stream_rpc_method_handler(
                calls, request_deserializer=pb.CallBatch.FromString,
                response_serializer=pb.ResultBatch.SerializeToString),
        }),
        grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(
                health_check, request_deserializer=identity, response_serializer=identity),
        }),
        grpc.method_handlers_generic_handler("plugin.GRPCController", {
            "Shutdown": grpc.unary_unary_rpc_method_handler(
                shutdown, request_deserializer=identity, response_serializer=identity),
        }),
    ))

    client_cert = os.environ.get("PLUGIN_CLIENT_CERT")
    server_cert_field = ""
    if client_cert:
        key_pem, cert_pem, cert_der = make_certificate()
        creds = grpc.ssl_server_credentials([(key_pem, cert_pem)],
                                            root_certificates=client_cert.encode(),
                                            require_client_auth=True)
        port = server.add_secure_port("127.0.0.1:0", creds)
        # go-plugin wants the DER certificate, base64 without padding.
        server_cert_field = base64.b64encode(cert_der).decode().rstrip("=")
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()

    line = "%d|%d|tcp|127.0.0.1:%d|grpc" % (CORE_PROTOCOL_VERSION, PROTOCOL_VERSION, port)
    if server_cert_field:
        line += "|" + server_cert_field
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    log("info", "python plugin serving", port=port, mtls=bool(client_cert))

    stopped.wait()
    server.stop(grace=1).wait()


def make_certificate():
    """A one-off self-signed certificate for localhost, as go-plugin's AutoMTLS expects."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acemq-flow plugin")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=30))
            .not_valid_after(now + datetime.timedelta(days=365 * 30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                         content_commitment=False, data_encipherment=False,
                                         key_agreement=True, key_cert_sign=True, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.DER)


if __name__ == "__main__":
    main()
