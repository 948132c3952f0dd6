package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime"
)

// adminClient calls the running runtime's admin API.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

func newAdminClient(addr, token string) *adminClient {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return &adminClient{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: 2 * time.Minute}}
}

func (a *adminClient) do(method, path string, out any) error {
	req, err := http.NewRequest(method, a.base+path, nil)
	if err != nil {
		return err
	}
	return a.send(req, out)
}

func (a *adminClient) send(req *http.Request, out any) error {
	method, path := req.Method, req.URL.Path
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("the runtime's admin API at %s does not answer (%v); is `acemq-flow run` running with --admin %s?", a.base, err, strings.TrimPrefix(a.base, "http://"))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s", e.Error)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		return json.Unmarshal(body, out)
	}
	return nil
}

// post sends a JSON body and decodes the JSON answer.
func (a *adminClient) post(path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequest("POST", a.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return a.send(req, out)
}

func newConsumersCmd(s streams) *cobra.Command {
	var admin, token, format string
	cmd := &cobra.Command{
		Use:   "consumers list | start ID | stop ID | scale ID N | prefetch ID N",
		Short: "See and steer the running runtime's consumers",
		Long: `See and steer the consumers of a running runtime, through its admin API
(--admin, env ACEMQ_ADMIN_ADDR; --admin-token, env ACEMQ_ADMIN_TOKEN, when it
listens beyond loopback). stop drains the consumer first; scale down blocks
while the removed consumers drain; a group needs at least one consumer.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&admin, "admin", envOr("ACEMQ_ADMIN_ADDR", "127.0.0.1:9464"), "the runtime's admin address (env ACEMQ_ADMIN_ADDR)")
	pf.StringVar(&token, "admin-token", envOr("ACEMQ_ADMIN_TOKEN", ""), "bearer token for calls that change something (env ACEMQ_ADMIN_TOKEN)")
	client := func() *adminClient { return newAdminClient(admin, token) }
	list := &cobra.Command{
		Use:   "list",
		Short: "List consumers with state, queue, size, prefetch and counters",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			var out struct {
				Consumers []runtime.ConsumerStatus `json:"consumers"`
			}
			if err := client().do("GET", "/v1/consumers", &out); err != nil {
				return failed("%v", err)
			}
			if format == "json" {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tQUEUE\tDEPTH\tSIZE\tPREFETCH\tIN-FLIGHT\tCOUNTERS")
			for _, c := range out.Consumers {
				depth := "-"
				if c.Depth != nil {
					depth = strconv.Itoa(*c.Depth)
				}
				var counters []string
				for _, k := range slices.Sorted(maps.Keys(c.Counters)) {
					if c.Counters[k] > 0 {
						counters = append(counters, fmt.Sprintf("%s=%d", k, c.Counters[k]))
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", c.ID, c.State, c.Queue, depth, c.Size, c.Prefetch, c.InFlight, strings.Join(counters, " "))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&format, "format", "text", "text or json")
	simple := func(use, short, verb string) *cobra.Command {
		return &cobra.Command{Use: use + " ID", Short: short, Args: cobra.ExactArgs(1), RunE: func(_ *cobra.Command, args []string) error {
			if err := client().do("POST", "/v1/consumers/"+url.PathEscape(args[0])+"/"+verb, nil); err != nil {
				return failed("%v", err)
			}
			fmt.Fprintf(s.err, "consumer %s: %s done\n", args[0], verb)
			return nil
		}}
	}
	number := func(use, short, verb, param string) *cobra.Command {
		return &cobra.Command{Use: use + " ID N", Short: short, Args: cobra.ExactArgs(2), RunE: func(_ *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return usage("%s %q is not a whole number", param, args[1])
			}
			path := fmt.Sprintf("/v1/consumers/%s/%s?%s=%d", url.PathEscape(args[0]), verb, param, n)
			if err := client().do("POST", path, nil); err != nil {
				return failed("%v", err)
			}
			fmt.Fprintf(s.err, "consumer %s: %s %d\n", args[0], param, n)
			return nil
		}}
	}
	cmd.AddCommand(list,
		simple("start", "Start a consumer (its queue is checked again)", "start"),
		simple("stop", "Drain and stop a consumer", "stop"),
		number("scale", "Set how many consumers the group runs", "scale", "size"),
		number("prefetch", "Change a consumer's prefetch", "prefetch", "prefetch"),
	)
	return cmd
}
