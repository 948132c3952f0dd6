package testenv

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ConfirmedChannel opens a connection to url and a channel on it in
// confirm mode, both closed when the test ends: a test publishing its
// input waits for each confirm, as a quorum queue may drop what a channel
// closed right after publishing had not yet handed it.
func ConfirmedChannel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch
}
