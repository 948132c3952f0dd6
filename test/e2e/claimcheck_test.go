package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
	"github.com/acemq/acemq-flow/test/testenv"
)

const claimCheckFlow = `version: acemq.flow/v1
name: cc
defaults:
  retry: {max_attempts: 10, initial_delay: 300ms, max_delay: 1s, jitter: 0}
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: big
    steps:
      - {name: a, handler: testkit.echo}
      - {name: b, handler: testkit.echo, auto_startup: false}
      - {name: c, handler: testkit.echo, auto_startup: false}
consumers:
  - {id: plain, queue: cc.plain, handler: testkit.echo, declare: {type: quorum}}
`

// bigPayload is a JSON document of n bytes.
func bigPayload(n int) []byte {
	const head, tail = `{"blob":"`, `"}`
	return []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
}

// heldReference takes the message waiting in queue (basic.get, then back
// to the queue) and checks it is the small claim-check reference of want,
// never the body.
func heldReference(t *testing.T, ch *amqp.Channel, queue string, want []byte) {
	t.Helper()
	var m amqp.Delivery
	testenv.Eventually(t, 60*time.Second, func() error {
		got, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return testenv.Errorf("%s is empty", queue)
		}
		m = got
		return nil
	})
	defer func() {
		if err := m.Nack(false, true); err != nil {
			t.Fatalf("requeue on %s: %v", queue, err)
		}
	}()
	key := stores.BlobKey(want)
	if len(m.Body) > 512 {
		t.Fatalf("%s holds a body of %d bytes, want the claim-check reference of a few dozen", queue, len(m.Body))
	}
	var ref struct {
		Key         string `json:"claim_check"`
		Size        int64  `json:"size"`
		ContentType string `json:"content_type"`
	}
	if err := json.Unmarshal(m.Body, &ref); err != nil {
		t.Fatalf("%s holds %q, want the reference JSON: %v", queue, m.Body, err)
	}
	if ref.Key != key || ref.Size != int64(len(want)) || ref.ContentType != "application/json" {
		t.Fatalf("%s holds the reference %+v, want key %s, size %d, content type application/json", queue, ref, key, len(want))
	}
	if m.Headers["x-acemq-claim-check"] != key || m.ContentType != "application/vnd.acemq.claim-check+json" {
		t.Fatalf("%s: header x-acemq-claim-check %v, content type %q; want %s and the claim-check content type", queue, m.Headers["x-acemq-claim-check"], m.ContentType, key)
	}
}

// TestClaimCheckTenMiBThroughThreeSteps sends 10 MiB through a three-step
// pipeline, with the file: and the PostgreSQL blob stores: it arrives
// intact, while what waits in the second and third steps' queues (their
// consumers held) is the reference, never the payload.
func TestClaimCheckTenMiBThroughThreeSteps(t *testing.T) {
	backends := map[string]func(t *testing.T) string{
		"file": func(t *testing.T) string { return "file:" + filepath.Join(t.TempDir(), "blobs") },
	}
	if os.Getenv("ACEMQ_TEST_POSTGRES_URL") != "" {
		backends["postgres"] = func(t *testing.T) string { return testenv.PostgresSchema(t) }
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			url := testenv.VHost(t)
			blobs := open(t)
			addr := testenv.FreeAddr(t)
			flow := writeFlow(t, claimCheckFlow)
			startRuntime(t, url, "--admin", addr, "--blobs", blobs, "--create-schema", flow)

			payload := bigPayload(10 << 20)
			data := filepath.Join(t.TempDir(), "payload.json")
			if err := os.WriteFile(data, payload, 0o644); err != nil {
				t.Fatal(err)
			}
			var (
				wg           sync.WaitGroup
				stdout, errb bytes.Buffer
				sendErr      error
				ctx, cancel  = context.WithTimeout(context.Background(), 3*time.Minute)
				sendCmd      = exec.CommandContext(ctx, binary, "send", flow, "--amqp", url, "--blobs", blobs, "--pipeline", "big", "--data", "@"+data, "--wait", "150s")
				held         = dial(t, url)
				start        = func(id string) { cliOK(t, "consumers", "start", id, "--admin", addr) }
			)
			defer cancel()
			sendCmd.Dir, sendCmd.Stdout, sendCmd.Stderr = repo, &stdout, &errb
			wg.Go(func() { sendErr = sendCmd.Run() })

			heldReference(t, held, "big.b", payload)
			if name == "file" {
				hex := strings.TrimPrefix(stores.BlobKey(payload), "sha256:")
				got, err := os.ReadFile(filepath.Join(storeurl.FilePath(blobs), "sha256", hex[:2], hex))
				if err != nil || !bytes.Equal(got, payload) {
					t.Fatalf("the file: blob store does not hold the payload's exact bytes under its key (%d bytes read, %v)", len(got), err)
				}
			}
			start("big.b")
			heldReference(t, held, "big.c", payload)
			start("big.c")
			wg.Wait()
			if sendErr != nil || !strings.Contains(errb.String(), "outcome: completed") {
				t.Fatalf("send --wait: %v\nstderr %s", sendErr, errb.String())
			}
			if got := bytes.TrimSuffix(stdout.Bytes(), []byte("\n")); !bytes.Equal(got, payload) {
				t.Fatalf("the reply's payload is %d bytes, want the 10 MiB sent, intact", len(got))
			}
		})
	}
}

// cliOK runs the binary and fails the test unless it exits 0.
func cliOK(t *testing.T, args ...string) {
	t.Helper()
	if out, errOut, code := cli(t, args...); code != 0 {
		t.Fatalf("acemq-flow %s: exit %d\nstdout %s\nstderr %s", strings.Join(args, " "), code, out, errOut)
	}
}

// publishTo publishes body to queue with props, confirmed.
func publishTo(t *testing.T, ch *amqp.Channel, queue string, p amqp.Publishing) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	p.DeliveryMode = amqp.Persistent
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, p)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(t.Context()); err != nil || !ok {
		t.Fatalf("publish to %s not confirmed: %v", queue, err)
	}
}

// reference is a claim-check message for content, as a sender writes it.
func reference(content []byte, replyTo string) amqp.Publishing {
	key := stores.BlobKey(content)
	return amqp.Publishing{
		MessageId: fmt.Sprintf("cc-%d", time.Now().UnixNano()), ReplyTo: replyTo,
		ContentType: "application/vnd.acemq.claim-check+json",
		Headers:     amqp.Table{"x-acemq-claim-check": key},
		Body:        fmt.Appendf(nil, `{"claim_check":%q,"size":%d,"content_type":"application/json"}`, key, len(content)),
	}
}

// TestClaimCheckReadsEveryKindOfMessage: a message from before the claim
// check (no header, a plain body) is handled as it is; a reference whose
// blob is damaged or missing is dead-lettered with kind claim-check, naming
// its key, the handler not called.
func TestClaimCheckReadsEveryKindOfMessage(t *testing.T) {
	url := testenv.VHost(t)
	blobs := "file:" + filepath.Join(t.TempDir(), "blobs")
	startRuntime(t, url, "--blobs", blobs, writeFlow(t, claimCheckFlow))
	ch := dial(t, url)
	replies := consumeResults(t, ch, "cc.replies")

	old := amqp.Publishing{MessageId: "pre-claim-check", ReplyTo: "cc.replies", ContentType: "application/json", Body: []byte(`{"from":"before"}`)}
	publishTo(t, ch, "cc.plain", old)
	select {
	case m := <-replies.ch:
		if string(m.Body) != `{"from":"before"}` || m.Headers["x-acemq-outcome"] != "completed" {
			t.Fatalf("the pre-claim-check message's reply is %q (%v), want its body back, completed", m.Body, m.Headers["x-acemq-outcome"])
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no reply to the pre-claim-check message")
	}

	// A damaged copy: the file under the key holds other bytes.
	damaged := bigPayload(100 << 10)
	key := stores.BlobKey(damaged)
	hex := strings.TrimPrefix(key, "sha256:")
	dir := filepath.Join(storeurl.FilePath(blobs), "sha256", hex[:2])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, hex), bytes.ToUpper(damaged), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := bigPayload(200 << 10)
	for _, c := range []struct {
		content []byte
		want    string
	}{{damaged, "fails its SHA-256 check"}, {missing, "is not in the blob store"}} {
		publishTo(t, ch, "cc.plain", reference(c.content, ""))
		dl := getOne(t, ch, "cc.plain.dlq", 60*time.Second)
		reason := fmt.Sprint(dl.Headers["x-acemq-error"])
		if dl.Headers["x-acemq-error-kind"] != "claim-check" || !strings.Contains(reason, stores.BlobKey(c.content)) || !strings.Contains(reason, c.want) {
			t.Fatalf("dead letter kind %v, reason %q; want kind claim-check and a reason naming %s that says it %s", dl.Headers["x-acemq-error-kind"], reason, stores.BlobKey(c.content), c.want)
		}
		if dl.Headers["x-acemq-claim-check"] != stores.BlobKey(c.content) || len(dl.Body) > 512 {
			t.Fatalf("the dead letter is not the reference as it arrived: header %v, %d bytes", dl.Headers["x-acemq-claim-check"], len(dl.Body))
		}
	}

	// Replay republishes the reference unchanged: once its blob is
	// stored, the replayed message is read, and its result, as large,
	// travels by claim check again.
	later := bigPayload(300 << 10)
	publishTo(t, ch, "cc.plain", reference(later, "cc.replies"))
	select {
	case m := <-replies.ch:
		if m.Headers["x-acemq-outcome"] != "dead-lettered" {
			t.Fatalf("the reply to a reference of a missing blob is %v, want dead-lettered", m.Headers["x-acemq-outcome"])
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no dead-lettered reply to the reference of a missing blob")
	}
	b, err := storeurl.OpenBlobs(t.Context(), blobs, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.PutBlob(t.Context(), later); err != nil {
		t.Fatal(err)
	}
	cliOK(t, "replay", "cc.plain.dlq", "--amqp", url)
	select {
	case m := <-replies.ch:
		if m.Headers["x-acemq-outcome"] != "completed" || m.Headers["x-acemq-claim-check"] != stores.BlobKey(later) || len(m.Body) > 512 {
			t.Fatalf("the replayed reference's reply is %v with claim check %v (%d bytes), want completed, by claim check of %s",
				m.Headers["x-acemq-outcome"], m.Headers["x-acemq-claim-check"], len(m.Body), stores.BlobKey(later))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the replayed reference never completed")
	}
}

// faultyProxy forwards TCP connections to upstream until down is called,
// which drops every connection and refuses new ones; up listens again.
type faultyProxy struct {
	upstream, addr string
	mu             sync.Mutex
	ln             net.Listener
	conns          []net.Conn
	wg             sync.WaitGroup
}

func startFaultyProxy(t *testing.T, upstream string) *faultyProxy {
	t.Helper()
	p := &faultyProxy{upstream: upstream, addr: testenv.FreeAddr(t)}
	p.up(t)
	t.Cleanup(func() { p.down(); p.wg.Wait() })
	return p
}

func (p *faultyProxy) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
		}
	})
}

func (p *faultyProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestClaimCheckBlobStoreDownIsRetried: while the PostgreSQL blob store
// cannot be reached, a reference is held (the store's outage is not the
// message's fault: no attempt spent), never dead-lettered, and is read once
// the store is back.
func TestClaimCheckBlobStoreDownIsRetried(t *testing.T) {
	url := testenv.VHost(t)
	pg := testenv.PostgresSchema(t)
	b, err := storeurl.OpenBlobs(t.Context(), pg, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	content := []byte(`{"k":"kept in the blob store"}`)
	if _, err := b.PutBlob(t.Context(), content); err != nil {
		t.Fatal(err)
	}
	proxy := startFaultyProxy(t, "127.0.0.1:5432")
	viaProxy := strings.Replace(pg, "127.0.0.1:5432", proxy.addr, 1)
	viaProxy = strings.Replace(viaProxy, "localhost:5432", proxy.addr, 1)
	if viaProxy == pg {
		t.Fatalf("the PostgreSQL URL names no 127.0.0.1:5432 or localhost:5432 to reroute: %s", stores.Redact(pg))
	}
	rt := startRuntime(t, url, "--blobs", viaProxy, writeFlow(t, claimCheckFlow))
	ch := dial(t, url)
	replies := consumeResults(t, ch, "cc.replies")

	proxy.down()
	publishTo(t, ch, "cc.plain", reference(content, "cc.replies"))
	if !rt.waitLog(t, `outcome=held`, 60*time.Second) {
		t.Fatalf("the reference was not held while the blob store was down; the log:\n%s", rt.output())
	}
	proxy.up(t)
	select {
	case m := <-replies.ch:
		if !bytes.Equal(m.Body, content) || m.Headers["x-acemq-outcome"] != "completed" {
			t.Fatalf("the reply is %q (%v), want the blob's content, completed", m.Body, m.Headers["x-acemq-outcome"])
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no reply once the blob store was back; the log:\n%s", rt.output())
	}
	if _, ok, err := ch.Get("cc.plain.dlq", true); err != nil || ok {
		t.Fatalf("cc.plain.dlq holds a message (%v, %v): the store's outage dead-lettered it", ok, err)
	}
}

// TestRunServesTheSchemaRegistry: `run --schema-registry` serves the
// Confluent REST subset from --store on the admin listener. It also warns,
// at start, where a flow's ladder outlasts --blob-retention, and purges the
// blob store.
func TestRunServesTheSchemaRegistry(t *testing.T) {
	url := testenv.VHost(t)
	addr := testenv.FreeAddr(t)
	store := "sqlite:" + filepath.Join(t.TempDir(), "flow.db")
	rt := startRuntime(t, url, "--admin", addr, "--store", store, "--create-schema", "--schema-registry",
		"--blobs", "memory:", "--blob-retention", "2s", writeFlow(t, claimCheckFlow))
	for _, want := range []string{`msg="a message may outlive its claim-checked payload"`, `msg="blob store purged"`} {
		if !rt.waitLog(t, want, 30*time.Second) {
			t.Errorf("the runtime's log lacks %s:\n%s", want, rt.output())
		}
	}
	resp, err := http.Get("http://" + addr + "/subjects")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("GET /subjects: %d %s, want 200 and an empty list", resp.StatusCode, body)
	}
}

// TestSendAboveTheThresholdNeedsTheBlobStore: send refuses a payload above
// the input type's threshold when it is not given the blob store, before
// anything is sent.
func TestSendAboveTheThresholdNeedsTheBlobStore(t *testing.T) {
	url := testenv.VHost(t)
	data := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(data, bigPayload(100<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "send", writeFlow(t, claimCheckFlow), "--amqp", url, "--pipeline", "big", "--data", "@"+data)
	cmd.Dir, cmd.Env = repo, append(os.Environ(), "ACEMQ_BLOBS_URL=")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "give --blobs") || strings.Contains(string(out), "sent message") {
		t.Fatalf("send of 100 KiB without --blobs: %v\n%s\nwant exit 1 saying to give --blobs, nothing sent", err, out)
	}
}

// TestRunWithoutItsDefaultBlobStore: where the default file:blobs cannot
// be made (here a file is in its way, as a read-only working directory
// would be), run starts without the claim check and says so; a --blobs it
// was given that cannot be opened stops it.
func TestRunWithoutItsDefaultBlobStore(t *testing.T) {
	url := testenv.VHost(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "blobs"), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	flow := writeFlow(t, claimCheckFlow)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--amqp", url, "--admin", "", flow)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "ACEMQ_BLOBS_URL=")
	var log testenv.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	testenv.Eventually(t, 50*time.Second, func() error {
		if !strings.Contains(log.String(), `msg="runtime started"`) {
			return testenv.Errorf("the runtime has not started; its log:\n%s", log.String())
		}
		return nil
	})
	if !strings.Contains(log.String(), `msg="claim check off: the default blob store cannot be opened`) {
		t.Fatalf("the runtime started without saying the claim check is off:\n%s", log.String())
	}

	given := exec.CommandContext(ctx, binary, "run", "--amqp", url, "--admin", "", "--blobs", "file:"+filepath.Join(dir, "blobs"), flow)
	out, err := given.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "blob store") {
		t.Fatalf("run with a --blobs that cannot be opened: %v\n%s\nwant exit 1 naming the blob store", err, out)
	}
}
