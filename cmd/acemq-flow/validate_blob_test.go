package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validate warns where a message could outlive its claim-checked payload,
// against the retention it is given (the runtime's --blob-retention, 30
// days when left out), and a warning does not fail it.
func TestValidateWarnsOfBlobRetention(t *testing.T) {
	dir := t.TempDir()
	flow := filepath.Join(dir, "scans.yaml")
	if err := os.WriteFile(flow, []byte(`version: acemq.flow/v1
name: scans
defaults:
  retry: {max_attempts: 6, initial_delay: 1h, max_delay: 4h}
plugins:
  ocr: {command: ./ocr}
pipelines:
  - name: scan
    steps:
      - {name: read, handler: ocr.read}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The ladder waits 1h+2h+4h+4h+4h = 15h in all.
	out, errOut, code := cli(t, "validate", flow)
	if code != 0 || strings.Contains(out, "blob-retention") || strings.Contains(out, "warning") {
		t.Fatalf("validate under the default 30 days: exit %d, out %q, err %q; want 0 and no warning", code, out, errOut)
	}
	out, errOut, code = cli(t, "validate", "--blob-retention", "12h", flow)
	if code != 0 || !strings.Contains(out, "scans.yaml:4:11: warning: step \"read\" of pipeline \"scan\": the retry ladder waits up to 15h0m0s in all, longer than the blob retention 12h0m0s") {
		t.Fatalf("validate --blob-retention 12h: exit %d, out %q, err %q; want 0 and the ladder's warning", code, out, errOut)
	}
	if _, errOut, code := cli(t, "validate", "--blob-retention", "0s", flow); code != 2 || !strings.Contains(errOut, "--blob-retention") {
		t.Fatalf("validate --blob-retention 0s: exit %d, err %q; want 2 naming the flag", code, errOut)
	}
}
