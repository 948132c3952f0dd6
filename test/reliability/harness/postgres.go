package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Postgres is a PostgreSQL cluster of the scenario's own, on a loopback
// port and a data directory under /tmp, so that a scenario can crash and
// restart it (S10) without touching the shared database the other tests
// use. fsync stays on: a crash test without it proves nothing. It is
// stopped (immediate) and removed when the test ends.
type Postgres struct {
	URL  string // postgres://acemq@127.0.0.1:PORT/acemq, trust authentication
	Port string
	dir  string
	bin  string
}

// PostgresBin is where StartPostgres looks for initdb and pg_ctl first;
// else under /usr/lib/postgresql/<version>/bin, the newest version.
const PostgresBin = "ACEMQ_TEST_PG_BIN"

func postgresBin() string {
	if d := os.Getenv(PostgresBin); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	return ""
}

func versionOf(bin string) int {
	var v int
	fmt.Sscan(filepath.Base(filepath.Dir(bin)), &v)
	return v
}

// StartPostgres initialises and starts a private cluster and creates its
// database acemq. It skips the test, saying why, only when the server's
// binaries are absent; any other failure fails it. As root, the cluster
// runs as the postgres user (initdb refuses root).
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin := postgresBin()
	if bin == "" {
		t.Skipf("no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin; install postgresql, or set %s to their folder, to run this scenario", PostgresBin)
	}
	dir, err := os.MkdirTemp("", "acemq-pg-")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	p := &Postgres{Port: port, dir: dir, bin: bin, URL: fmt.Sprintf("postgres://acemq@127.0.0.1:%s/acemq?sslmode=disable", port)}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chown", "postgres:postgres", dir).CombinedOutput(); err != nil {
			t.Fatalf("chown postgres %s: %v\n%s", dir, err, out)
		}
	}
	t.Cleanup(func() {
		_, _ = p.pgctl("stop", "-m", "immediate")
		os.RemoveAll(dir)
	})
	if out, err := p.run(filepath.Join(bin, "initdb"), "-D", p.data(), "-U", "acemq", "--auth=trust", "--no-sync"); err != nil {
		t.Fatalf("initdb %s: %v\n%s", p.data(), err, out)
	}
	p.Start(t)
	PSQL(t, strings.Replace(p.URL, "/acemq?", "/postgres?", 1), "CREATE DATABASE acemq")
	return p
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

// run runs name with args as the cluster's owner.
func (p *Postgres) run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		quoted := []string{shellQuote(name)}
		for _, a := range args {
			quoted = append(quoted, shellQuote(a))
		}
		cmd = exec.CommandContext(ctx, "su", "postgres", "-s", "/bin/sh", "-c", strings.Join(quoted, " "))
	} else {
		cmd = exec.CommandContext(ctx, name, args...)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (p *Postgres) pgctl(args ...string) (string, error) {
	return p.run(filepath.Join(p.bin, "pg_ctl"), append([]string{"-D", p.data(), "-w", "-t", "60"}, args...)...)
}

// Start starts the cluster and waits until it accepts connections.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %s -k %s -c listen_addresses=127.0.0.1 -c fsync=on", p.Port, p.dir)
	if out, err := p.pgctl("-l", filepath.Join(p.dir, "log"), "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
		t.Fatalf("pg_ctl start on port %s: %v\n%s\n%s", p.Port, err, out, Tail(string(log), 20))
	}
}

// Stop stops the cluster with pg_ctl's mode: "immediate" is a crash (no
// checkpoint; recovery replays the WAL at the next start), "fast" a clean
// shutdown that disconnects every client.
func (p *Postgres) Stop(t testing.TB, mode string) {
	t.Helper()
	if out, err := p.pgctl("stop", "-m", mode); err != nil {
		t.Fatalf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
