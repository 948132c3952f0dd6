package ops_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/testenv"
)

const sendClaimCheckFlow = `version: acemq.flow/v1
name: s
types:
  Doc: {type: object, claim_check: {above: 2KiB}}
plugins:
  k: {command: ./not-started}
pipelines:
  - name: typed
    input: Doc
    steps:
      - {name: a, handler: k.echo}
  - name: untyped
    steps:
      - {name: a, handler: k.echo}
`

func TestFirstClaimCheckAbove(t *testing.T) {
	set, err := spec.Load(testenv.FlowFS(sendClaimCheckFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		target decide.Target
		want   int64
	}{
		{"a pipeline takes its input type's threshold", decide.Target{Pipeline: "typed"}, 2 << 10},
		{"a pipeline of no input type takes the file's default", decide.Target{Pipeline: "untyped"}, spec.DefaultClaimCheckAbove},
		{"an exchange and key take the default", decide.Target{Exchange: "x", RoutingKey: "k"}, 0},
		{"a target the plan lacks takes the default", decide.Target{Pipeline: "nope"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ops.FirstClaimCheckAbove(pl, tc.target); got != tc.want {
				t.Fatalf("FirstClaimCheckAbove(%+v) = %d, want %d", tc.target, got, tc.want)
			}
		})
	}
}

func TestClaimCheck(t *testing.T) {
	blobs, err := memory.OpenBlobs(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(n int) decide.Message {
		return decide.Message{MessageID: "m", ContentType: "application/json", Timestamp: time.Unix(0, 0),
			Headers: decide.Table{"x-acemq-attempt": int64(1)}, Body: bytes.Repeat([]byte("x"), n)}
	}
	// At the threshold: inline.
	out, put, err := ops.ClaimCheck(t.Context(), blobs, msg(2<<10), 2<<10)
	if err != nil || put || len(out.Body) != 2<<10 || out.Headers[decide.HeaderClaimCheck] != nil {
		t.Fatalf("ClaimCheck of a body at the threshold = put %v, %d bytes, %v; want it inline", put, len(out.Body), err)
	}
	// Above it: put, and the reference in its place.
	in := msg(2<<10 + 1)
	out, put, err = ops.ClaimCheck(t.Context(), blobs, in, 2<<10)
	key := stores.BlobKey(in.Body)
	if err != nil || !put || out.Headers[decide.HeaderClaimCheck] != key || out.ContentType != decide.ClaimCheckContentType {
		t.Fatalf("ClaimCheck above the threshold = put %v, header %v, content type %q, %v; want the reference of %s", put, out.Headers[decide.HeaderClaimCheck], out.ContentType, err, key)
	}
	ref, ok, err := decide.ReadClaimCheck(out)
	if err != nil || !ok || ref.Size != int64(len(in.Body)) || ref.ContentType != "application/json" {
		t.Fatalf("the reference reads as %+v, %v, %v; want size %d, application/json", ref, ok, err, len(in.Body))
	}
	if got, err := blobs.GetBlob(t.Context(), key); err != nil || !bytes.Equal(got, in.Body) {
		t.Fatalf("the blob store holds %d bytes under %s (%v), want the body", len(got), key, err)
	}
	if in.Headers[decide.HeaderClaimCheck] != nil || len(in.Body) != 2<<10+1 {
		t.Fatal("ClaimCheck changed the message it was given")
	}
	// Above it with no blob store: refused, saying what to give.
	if _, _, err := ops.ClaimCheck(t.Context(), nil, in, 2<<10); err == nil || !strings.Contains(err.Error(), "--blobs") {
		t.Fatalf("ClaimCheck with no blob store = %v, want an error saying to give --blobs", err)
	}
}
