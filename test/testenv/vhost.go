package testenv

import (
	"net/url"
	"strings"
	"testing"
)

// VHost creates a RabbitMQ virtual host of the test's own, lets the URL's
// user in, and returns the URL pointing at it. The vhost (and everything
// in it) is deleted in t.Cleanup. It needs rabbitmqctl (as root, as CI runs).
func VHost(t testing.TB) string {
	t.Helper()
	raw := AMQP(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	name := Names(t)
	Rabbitmqctl(t, "add_vhost", name)
	t.Cleanup(func() { Rabbitmqctl(t, "delete_vhost", name) })
	user := "guest"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	Rabbitmqctl(t, "set_permissions", "-p", name, user, ".*", ".*", ".*")
	u.Path = "/" + url.PathEscape(name)
	u.RawPath = ""
	return u.String()
}

// CloseConnections force-closes every client connection to vhost whose name
// contains match, and returns how many it closed.
func CloseConnections(t testing.TB, vhost, match string) int {
	t.Helper()
	out := Rabbitmqctl(t, "list_connections", "-q", "--no-table-headers", "pid", "vhost", "client_properties")
	n := 0
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[1] != vhost || !strings.Contains(line, match) {
			continue
		}
		Rabbitmqctl(t, "close_connection", fields[0], "closed by a test")
		n++
	}
	return n
}

// VHostOf returns the vhost name of an AMQP URL.
func VHostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Path == "" || u.Path == "/" {
		return "/"
	}
	v, _ := url.PathUnescape(strings.TrimPrefix(u.Path, "/"))
	return v
}
