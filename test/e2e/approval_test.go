package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/test/testenv"
)

// TestApprovalItineraryVisitsApproveOnlyOverTheThreshold runs the approval
// example: an order over 1000 visits approve, one under it does not, as the
// slip's done list says.
func TestApprovalItineraryVisitsApproveOnlyOverTheThreshold(t *testing.T) {
	url := testenv.VHost(t)
	store := "sqlite:" + filepath.Join(t.TempDir(), "acemq.db")
	startRuntime(t, url, "--store", store, "--create-schema", "examples/flows/approval.yaml")
	cases := []struct {
		name, data string
		approve    bool
	}{
		{"an order over the threshold is approved", "@examples/flows/data/big-order.json", true},
		{"an order under it skips approval", "@examples/flows/data/order.json", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := cli(t, "send", "examples/flows/approval.yaml", "--amqp", url, "--itinerary", "order-approval",
				"--data", tc.data, "--wait", "60s")
			if code != 0 || !strings.Contains(errOut, "outcome: completed") {
				t.Fatalf("send: exit %d\n%s", code, errOut)
			}
			var route string
			for _, line := range strings.Split(errOut, "\n") {
				if r, ok := strings.CutPrefix(line, "route: "); ok {
					route = r
				}
			}
			if !strings.Contains(route, "validate ✓") || !strings.Contains(route, "charge ✓") {
				t.Errorf("route %q does not show validate and charge done", route)
			}
			if got := strings.Contains(route, "approve ✓"); got != tc.approve {
				t.Errorf("route %q: approve visited = %v, want %v", route, got, tc.approve)
			}
		})
	}
}

// TestIdempotentConsumerHandlesADuplicateOnce publishes the same message id
// twice to the approval example's idempotent charge consumer: the payment
// is taken once, and the second delivery is acknowledged as a duplicate.
func TestIdempotentConsumerHandlesADuplicateOnce(t *testing.T) {
	url := testenv.VHost(t)
	store := "sqlite:" + filepath.Join(t.TempDir(), "acemq.db")
	p := startRuntime(t, url, "--store", store, "--create-schema", "examples/flows/approval.yaml")
	ch := dial(t, url)
	res := consumeResults(t, ch, "results")
	pub := dial(t, url)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	order, err := os.ReadFile(filepath.Join(repo, "examples/flows/data/order.json"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		dc, err := pub.PublishWithDeferredConfirmWithContext(t.Context(), "orders-events", "order.charge", true, false, amqp.Publishing{
			MessageId: "dup-1", ReplyTo: "results", ContentType: "application/json", Body: order})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
	res.atLeast(t, 1, 60*time.Second)
	if !p.waitLog(t, `msg="delivery settled" flow=shop-approval consumer=order-charge queue=orders.charge outcome=duplicate`, 30*time.Second) {
		t.Fatalf("the second delivery was not acknowledged as a duplicate; log:\n%s", tail(p.output(), 40))
	}
	if n := strings.Count(p.output(), `msg="payment taken"`); n != 1 {
		t.Errorf("the payment was taken %d times for one message id, want once", n)
	}
}
