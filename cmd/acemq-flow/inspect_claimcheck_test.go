package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime/ops"
)

func TestInspectTextShowsTheClaimCheck(t *testing.T) {
	key := "sha256:" + strings.Repeat("ab", 32)
	var buf bytes.Buffer
	renderInspectText(&buf, ops.QueueView{Queue: "scans.read.dlq", Depth: 2, Messages: []ops.MessageView{
		{MessageID: "checked", Attempt: 5, ClaimCheck: &ops.ClaimCheckView{Key: key, Size: 10 << 20, ContentType: "application/json"}, Size: 120, Preview: `{"claim_check":"…"}`},
		{MessageID: "broken", Attempt: 1, ClaimCheckError: "malformed claim-check reference: the body has no claim_check key", Size: 10, Preview: `{"scan":1}`},
	}})
	for _, want := range []string{
		"   claim check " + key + ": a payload of 10485760 bytes (application/json) in the blob store, not fetched\n",
		"   claim check cannot be read: malformed claim-check reference: the body has no claim_check key\n",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("inspect text lacks %q:\n%s", want, buf.String())
		}
	}
}
