package broker

import (
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A TLS 1.3 broker's alert that comes after the client's side of the
// handshake reaches amqp091-go's first read, which reports only its text
// in a frame error: it is explained as the alert of a handshake is.
func TestTLSRefusalOfAnAlertReadAfterTheHandshake(t *testing.T) {
	late := fmt.Errorf("connect: %w", &amqp.Error{Code: amqp.FrameError, Reason: "remote error: tls: certificate required"})
	if got := tlsRefusal(late); !strings.Contains(got, "certfile=PATH&keyfile=PATH") || !strings.Contains(got, "certificate required") {
		t.Errorf("tlsRefusal(%v) = %q; want the alert and the client certificate's hint", late, got)
	}
	other := &amqp.Error{Code: amqp.FrameError, Reason: "EOF"}
	if got := tlsRefusal(other); got != "" {
		t.Errorf("tlsRefusal(%v) = %q; want none (no TLS failure)", other, got)
	}
}
