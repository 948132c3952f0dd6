package spec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  string // a part of the error, "" for none
	}{
		{"65536", 65536, ""},
		{"64KiB", 64 << 10, ""},
		{"64 KiB", 64 << 10, ""},
		{"1MiB", 1 << 20, ""},
		{"2GiB", 2 << 30, ""},
		{"100B", 100, ""},
		{"0", 0, ""},
		{"64KB", 0, "write 64KiB"},
		{"1mb", 0, "write 1MiB"},
		{"KiB", 0, "not a size"},
		{"1.5MiB", 0, "not a size"},
		{"-1", 0, "not a size"},
		{"99999999999999999999", 0, "too large"},
		{"9999999999GiB", 0, "too large"},
	}
	for _, tc := range cases {
		got, err := spec.ParseSize(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSize(%q) = %d, %v; want an error saying %q", tc.in, got, err, tc.err)
		}
	}
	for n, want := range map[int64]string{64 << 10: "64KiB", 1 << 20: "1MiB", 1000: "1000B", 3 << 30: "3GiB", 1536: "1536B"} {
		if got := spec.FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %s, want %s", n, got, want)
		}
	}
}

// A type's threshold wins over the file's, the file's over the built-in
// 64 KiB, and the claim_check key is not part of the type's JSON Schema.
func TestClaimCheckAbove(t *testing.T) {
	set, err := spec.LoadPaths(spec.Options{}, "testdata/valid/claim-check.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := set.Flows[0]
	for name, want := range map[string]int64{"Report": 16 << 10, "Small": 65536, "Page": 256 << 10, "": 256 << 10, "Unknown": 256 << 10} {
		if got := f.ClaimCheckAbove(name); got != want {
			t.Errorf("ClaimCheckAbove(%q) = %d, want %d", name, got, want)
		}
	}
	for _, ty := range f.Types {
		if strings.Contains(string(ty.Schema), "claim_check") {
			t.Errorf("type %s's schema %s holds claim_check; it is not a JSON Schema keyword", ty.Name, ty.Schema)
		}
	}

	set, err = spec.LoadWith(testenv.FlowFS("version: acemq.flow/v1\nname: plain\ntypes: {A: {type: object}}\n"), spec.Options{}, "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Flows[0].ClaimCheckAbove("A"); got != spec.DefaultClaimCheckAbove || spec.DefaultClaimCheckAbove != 64<<10 {
		t.Errorf("ClaimCheckAbove without any claim_check = %d, want 64 KiB", got)
	}
	if got := set.Flows[0].Defaults.ClaimCheck.Above; got != 64<<10 {
		t.Errorf("Defaults.ClaimCheck.Above left out = %d, want the default filled in, 64 KiB", got)
	}
}

func TestCheckBlobRetention(t *testing.T) {
	const flow = `version: acemq.flow/v1
name: scans
defaults:
  retry: {max_attempts: 10, initial_delay: 1h, max_delay: 24h}
plugins:
  ocr: {command: ./ocr}
pipelines:
  - name: scan
    steps:
      - {name: read, handler: ocr.read, retry: {max_attempts: 3, initial_delay: 1s, max_delay: 2s}}
      - {name: file, handler: ocr.file, delay: 1000h, retry: {max_attempts: 1}}
consumers:
  - id: audit
    queue: scans.audit
    handler: ocr.audit
    declare: {arguments: {x-message-ttl: 3000000000}}
topology:
  queues:
    - {name: scans.archive, arguments: {x-message-ttl: 1000}}
`
	set, err := spec.LoadWith(testenv.FlowFS(flow), spec.Options{}, "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		line int
		msg  string
	}
	cases := []struct {
		name      string
		retention time.Duration
		want      []want
	}{
		{"under the default 30 days: the long delay, the audit ladder and the audit queue's TTL", 0, []want{
			{11, `step "file" of pipeline "scan" has a delay of 1000h0m0s, longer than the blob retention 720h0m0s`},
			// 1h+2h+4h+8h+16h+24h*4 = 127h: under 30 days; the TTL is 833h.
			{16, `queue "scans.audit" keeps a message up to 833h20m0s (x-message-ttl), longer than the blob retention 720h0m0s`},
		}},
		{"under 1 day: the audit consumer's ladder too, where it is written (defaults.retry)", 24 * time.Hour, []want{
			{4, `consumer "audit": the retry ladder waits up to 127h0m0s in all, longer than the blob retention 24h0m0s`},
			{11, `has a delay of 1000h0m0s`},
			{16, `queue "scans.audit" keeps a message up to 833h20m0s`},
		}},
		{"under a year: nothing", 365 * 24 * time.Hour, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := spec.CheckBlobRetention(set.Flows, tc.retention)
			if len(ds) != len(tc.want) {
				t.Fatalf("CheckBlobRetention(%s) = %d diagnostics, want %d:\n%v", tc.retention, len(ds), len(tc.want), ds)
			}
			for i, d := range ds {
				w := tc.want[i]
				if d.Severity != spec.Warning || d.Code != "blob-retention" || d.Pos.Line != w.line || !strings.Contains(d.Msg, w.msg) || !strings.Contains(d.Hint, "--blob-retention") {
					t.Errorf("diagnostic %d = %s (%s, %s), want a blob-retention warning at line %d saying %q", i, d, d.Severity, d.Code, w.line, w.msg)
				}
			}
		})
	}
}

func TestLadderWait(t *testing.T) {
	cases := []struct {
		r    spec.Retry
		want time.Duration
	}{
		{spec.DefaultRetry, 2*time.Second + 4*time.Second + 8*time.Second + 16*time.Second},
		{spec.Retry{MaxAttempts: 1, InitialDelay: time.Hour, MaxDelay: time.Hour}, 0},
		{spec.Retry{MaxAttempts: 4, InitialDelay: time.Second, MaxDelay: 2 * time.Second}, 5 * time.Second},
		{spec.Retry{MaxAttempts: 1 << 62, InitialDelay: time.Hour, MaxDelay: 1 << 62}, 1<<63 - 1},
	}
	for _, tc := range cases {
		if got := tc.r.LadderWait(); got != tc.want {
			t.Errorf("%+v.LadderWait() = %s, want %s", tc.r, got, tc.want)
		}
	}
}
