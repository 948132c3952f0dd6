#!/usr/bin/python3
"""A client that is not acemq-flow: it writes a routing slip itself, sends a
message into a route whose middle stop acemq-flow serves, and reads the
result at the end of the route, checking the slip field for field.

Usage: slip_client.py AMQP_URL EXCHANGE
Exit 0 when the slip is exactly what this client expects; prints why not
otherwise."""
import json
import sys
import uuid
from datetime import datetime

import pika

url, exchange = sys.argv[1], sys.argv[2]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.exchange_declare(exchange=exchange, exchange_type="topic", durable=True)
end = ch.queue_declare(queue="", exclusive=True).method.queue
ch.queue_bind(queue=end, exchange=exchange, routing_key="interop.end")
ch.confirm_delivery()

slip = {
    "steps": [
        {"exchange": exchange, "routingKey": "interop.middle", "name": "middle", "hint": {"team": "go"}},
        {"exchange": exchange, "routingKey": "interop.end", "name": "end"},
    ],
    "done": [
        {"exchange": exchange, "routingKey": "interop.start", "name": "start",
         "completedAt": "2026-09-09T14:03:11.250Z"},
    ],
    "trace": {"id": "t-42", "sampled": True},
}
msg_id = str(uuid.uuid4())
body = json.dumps({"order": "o-1", "total": 12.5}).encode()
ch.basic_publish(
    exchange=exchange, routing_key="interop.middle", body=body, mandatory=True,
    properties=pika.BasicProperties(
        message_id=msg_id, content_type="application/json", delivery_mode=2,
        headers={"acemq-routing-slip": json.dumps(slip)}),
)

problems = []
got = None
for method, props, payload in ch.consume(end, inactivity_timeout=30):
    if method is None:
        problems.append("no message reached the end of the route within 30s")
        break
    ch.basic_ack(method.delivery_tag)
    got = (props, payload)
    break

if got:
    props, payload = got
    raw = (props.headers or {}).get("acemq-routing-slip")
    if isinstance(raw, bytes):
        raw = raw.decode()
    out = json.loads(raw)
    if json.loads(payload) != {"order": "o-1", "total": 12.5}:
        problems.append("payload changed: %r" % payload)
    if out.get("trace") != {"id": "t-42", "sampled": True}:
        problems.append("unknown top-level field lost: %r" % out.get("trace"))
    if out.get("steps") != [{"exchange": exchange, "routingKey": "interop.end", "name": "end"}]:
        problems.append("steps should hold only the end stop: %r" % out.get("steps"))
    done = out.get("done", [])
    if len(done) != 2:
        problems.append("done should hold start and middle: %r" % done)
    else:
        if done[0] != slip["done"][0]:
            problems.append("the start stop changed: %r" % done[0])
        mid = done[1]
        for k, v in {"exchange": exchange, "routingKey": "interop.middle", "name": "middle", "hint": {"team": "go"}}.items():
            if mid.get(k) != v:
                problems.append("middle stop field %s is %r, want %r" % (k, mid.get(k), v))
        at = mid.get("completedAt", "")
        try:
            t = datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            problems.append("completedAt %r is not RFC 3339 UTC" % at)
    if props.correlation_id != msg_id:
        problems.append("correlation id %r, want the first message's id %r" % (props.correlation_id, msg_id))
    if (props.headers or {}).get("x-acemq-causation-id") not in (msg_id, msg_id.encode()):
        problems.append("causation id %r, want %r" % ((props.headers or {}).get("x-acemq-causation-id"), msg_id))

conn.close()
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("ok")
