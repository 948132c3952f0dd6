package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Node is one node of the private cluster `make cluster` starts
// (scripts/cluster.sh), beside the shared broker, which scenarios that
// stop, restart or kill a node use instead: nobody else uses these nodes.
type Node struct {
	Name string // the Erlang node name, acemq1@localhost
	AMQP string // 127.0.0.1:5681
}

// ClusterNodes are the nodes of scripts/cluster.sh.
var ClusterNodes = []Node{
	{Name: "acemq1@localhost", AMQP: "127.0.0.1:5681"},
	{Name: "acemq2@localhost", AMQP: "127.0.0.1:5682"},
	{Name: "acemq3@localhost", AMQP: "127.0.0.1:5683"},
}

// Short is the node's name before the '@', acemq1.
func (n Node) Short() string { name, _, _ := strings.Cut(n.Name, "@"); return name }

// Up reports whether the node's AMQP port answers.
func (n Node) Up() bool {
	c, err := net.DialTimeout("tcp", n.AMQP, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Ctl runs rabbitmqctl against the node and fails the test on an error.
func (n Node) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	return n.ctlWithin(t, time.Minute, args...)
}

// ctlWithin is Ctl allowing d: starting and stopping RabbitMQ in a node
// takes well over a minute on two cores busy with other tests.
func (n Node) ctlWithin(t testing.TB, d time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-n", n.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl -n %s %s: %v (after %s)\n%s", n.Name, strings.Join(args, " "), err, d, out)
	}
	return string(out)
}

// StopApp stops RabbitMQ on the node (the Erlang VM keeps running): its
// clients' connections are closed and its port refuses.
func (n Node) StopApp(t testing.TB) { t.Helper(); n.ctlWithin(t, 3*time.Minute, "stop_app") }

// StartApp starts RabbitMQ on the node again and waits until it runs.
func (n Node) StartApp(t testing.TB) {
	t.Helper()
	n.ctlWithin(t, 3*time.Minute, "start_app")
	n.ctlWithin(t, 3*time.Minute, "await_startup", "--timeout", "170")
}

// Kill kills the node's Erlang VM with SIGKILL and waits until it is gone:
// a crash, no goodbye to its clients or its peers.
func (n Node) Kill(t testing.TB) {
	t.Helper()
	out := strings.TrimSpace(n.Ctl(t, "eval", "list_to_integer(os:getpid())."))
	pid, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("the pid of %s: %q", n.Name, out)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (%s): %v", pid, n.Name, err)
	}
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(50 * time.Millisecond) // not our child: no wait(2)
	}
}

// Restart starts a node that is down (killed, or stopped with its VM) with
// scripts/cluster.sh start, which starts the nodes that do not run and
// waits for them; repo is the module's root.
func Restart(t testing.TB, repo string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repo, "scripts", "cluster.sh"), "start")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/cluster.sh start: %v\n%s", err, out)
	}
}

// Cluster gates a scenario on the private cluster: it skips, saying how to
// start it, when a node does not answer. `make chaos` and `make chaos-short`
// start it first.
func Cluster(t testing.TB) []Node {
	t.Helper()
	if os.Getenv(AMQPEnv) == "" {
		t.Skipf("%s is unset; run `make services` and `make chaos` (which sets it) to run the reliability suite", AMQPEnv)
	}
	for _, n := range ClusterNodes {
		if !n.Up() {
			t.Skipf("the private RabbitMQ cluster is not running (%s does not answer on %s); start it with `make cluster` (scripts/cluster.sh start; `make chaos` and `make chaos-short` do)", n.Name, n.AMQP)
		}
	}
	return ClusterNodes
}

// ClusterEnv is Env on the private cluster: a vhost of the scenario's own
// on the cluster (every node has it) and the ledger's schema on the shared
// database. Node is the node rabbitmqctl asks, URLs every node's URL at the
// vhost, AMQP the first of them.
func ClusterEnv(t testing.TB) *Services {
	t.Helper()
	nodes := Cluster(t)
	pgURL := need(t, PostgresEnv, "5432")
	s := &Services{Postgres: pgURL, VHost: Name(t), Node: nodes[0].Name}
	n := nodes[0]
	n.Ctl(t, "add_vhost", s.VHost)
	t.Cleanup(func() {
		// Whichever node runs at the end removes it.
		for _, n := range nodes {
			if _, err := rabbitmqctl("-n", n.Name, "delete_vhost", s.VHost); err == nil {
				return
			}
		}
	})
	n.Ctl(t, "set_permissions", "-p", s.VHost, "guest", ".*", ".*", ".*")
	for _, n := range nodes {
		u := url.URL{Scheme: "amqp", User: url.UserPassword("guest", "guest"), Host: n.AMQP, Path: "/" + s.VHost}
		s.URLs = append(s.URLs, u.String())
	}
	s.AMQP = s.URLs[0]
	s.Ledger = Schema(t, pgURL, "ledger")
	return s
}

// NodeAt returns the node whose AMQP address is addr (host:port, as
// /v1/status names a connection's node), or false.
func NodeAt(addr string) (Node, bool) {
	for _, n := range ClusterNodes {
		if n.AMQP == addr {
			return n, true
		}
	}
	return Node{}, false
}

// Leader returns the node leading quorum queue in vhost, asking the node
// at's management API (each rabbitmqctl call starts an Erlang VM: seconds
// on a busy machine).
func Leader(t testing.TB, at Node, vhost, queue string) (Node, bool) {
	t.Helper()
	return queueNode(t, at, vhost, queue, "the leader", func(q apiQueue) string { return q.Leader })
}

// Home returns the node a classic queue lives on, as the node at lists it.
func Home(t testing.TB, at Node, vhost, queue string) (Node, bool) {
	t.Helper()
	return queueNode(t, at, vhost, queue, "the home node", func(q apiQueue) string { return q.Node })
}

// queueNode is the node of ClusterNodes that pick names in queue's record,
// as the node at lists it; what says what is asked, for the log.
func queueNode(t testing.TB, at Node, vhost, queue, what string, pick func(apiQueue) string) (Node, bool) {
	t.Helper()
	q, err := at.queue(vhost, queue)
	if err != nil {
		t.Logf("%s of %s: %v", what, queue, err)
		return Node{}, false
	}
	for _, n := range ClusterNodes {
		if n.Name == pick(q) {
			return n, true
		}
	}
	return Node{}, false
}

// Members returns the quorum queue's members as the node at lists them,
// separated by spaces.
func Members(t testing.TB, at Node, vhost, queue string) string {
	t.Helper()
	q, err := at.queue(vhost, queue)
	if err != nil {
		t.Fatalf("the members of %s: %v", queue, err)
	}
	return strings.Join(q.Members, " ")
}

// Management is the node's management API, http://127.0.0.1:1568N.
func (n Node) Management() string {
	_, port, _ := net.SplitHostPort(n.AMQP)
	p, _ := strconv.Atoi(port)
	return fmt.Sprintf("http://127.0.0.1:%d", p+10000)
}

type apiQueue struct {
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Node    string   `json:"node"` // a classic queue's home node
}

// queue reads one queue's leader and members from the node's management
// API, as guest (scripts/cluster.sh lets guest in from loopback).
func (n Node) queue(vhost, queue string) (apiQueue, error) {
	req, err := http.NewRequest(http.MethodGet, n.Management()+"/api/queues/"+url.PathEscape(vhost)+"/"+url.PathEscape(queue), nil)
	if err != nil {
		return apiQueue{}, err
	}
	req.SetBasicAuth("guest", "guest")
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return apiQueue{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return apiQueue{}, fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	var q apiQueue
	err = json.NewDecoder(resp.Body).Decode(&q)
	return q, err
}

// Running returns the first node of nodes that answers, for rabbitmqctl.
func Running(t testing.TB, nodes []Node) Node {
	t.Helper()
	for _, n := range nodes {
		if n.Up() {
			return n
		}
	}
	t.Fatal("no node of the cluster answers")
	return Node{}
}

// String is the node's name.
func (n Node) String() string { return fmt.Sprintf("%s (%s)", n.Name, n.AMQP) }
