package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/acemq/acemq-flow/stores"
)

// unavailable marks *err as a *stores.UnavailableError when it says the
// server could not be reached or dropped the connection, rather than
// refusing the statement: the methods the runtime calls per message defer
// it, so that the runtime can tell an outage of its own store from a
// failure of the message.
func unavailable(err *error) {
	if *err != nil && connectionClass(*err) && !errors.Is(*err, stores.ErrUnavailable) {
		*err = &stores.UnavailableError{Backend: "postgres", Err: *err}
	}
}

// connectionClass reports whether err is a failure of the connection or
// the server rather than of the statement: nothing sent (pgconn's
// SafeToRetry), the connection closed or reset under the statement, a
// server shutting down, restarting or refusing connections (SQLSTATE class
// 08, 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
// 53300 too_many_connections), or a round trip that ran out of time. A
// context cancelled by the caller, or already past its deadline before
// anything was sent, is the caller's, not the server's.
func connectionClass(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A deadline reached before the statement was sent is the
		// caller's; reached while waiting for the server, the server's.
		return !pgconn.SafeToRetry(err)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE)
}
