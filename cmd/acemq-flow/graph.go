package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime"
)

func newGraphCmd(io streams) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "graph [--format mermaid|dot] PATH...",
		Short: "Draw the flows: pipelines, itineraries, sagas, schedules and consumers",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			draw, ok := map[string]func(*runtime.Plan) string{"mermaid": mermaid, "dot": dot}[format]
			if !ok {
				return usage("--format must be mermaid or dot, not %q", format)
			}
			_, plan, diags := loadAndCompile(io, args)
			_ = renderDiagText(io.err, diags)
			if diags.HasErrors() {
				return failed("the flows are invalid; fix the errors above")
			}
			_, err := fmt.Fprint(io.out, draw(plan))
			return err
		},
	}
	cmd.Flags().StringVar(&format, "format", "mermaid", "output format: mermaid or dot")
	return cmd
}

// graph is the drawing, independent of the output language.
type graph struct {
	clusters []cluster
	edges    []edge
	loose    []gnode // nodes outside any cluster (exchanges, schedules)
}

type cluster struct {
	id, label string
	nodes     []gnode
}

type gnode struct {
	id, label string
	shape     string // box, round, diamond, stadium
}

type edge struct {
	from, to, label string
	dashed          bool
}

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9_]+`)

func gid(parts ...string) string {
	return idUnsafe.ReplaceAllString(strings.Join(parts, "__"), "_")
}

// buildGraph draws from the plan, so the picture shows what `run` would do.
func buildGraph(p *runtime.Plan) graph {
	var g graph
	exchanges := map[string]bool{}
	exchangeNode := func(name string) string {
		id := gid("x", name)
		if !exchanges[name] {
			exchanges[name] = true
			g.loose = append(g.loose, gnode{id: id, label: "exchange " + name, shape: "stadium"})
		}
		return id
	}
	steps := map[string][]runtime.Consumer{}
	for _, c := range p.Consumers {
		if c.Kind == runtime.KindStep {
			steps[c.Pipeline] = append(steps[c.Pipeline], c)
		}
	}
	for _, st := range steps {
		slices.SortFunc(st, func(a, b runtime.Consumer) int { return a.Position - b.Position })
	}
	for _, pl := range p.Pipelines {
		cl := cluster{id: gid("pipeline", pl.Name), label: "pipeline " + pl.Name}
		var prev string
		for _, c := range steps[pl.Name] {
			id := gid("step", pl.Name, c.Step)
			label := c.Step + "\n" + c.Handler
			if c.Output != "" {
				label += "\n→ " + c.Output
			}
			cl.nodes = append(cl.nodes, gnode{id: id, label: label, shape: "box"})
			if prev != "" {
				lbl := ""
				if c.Delay > 0 {
					lbl = "after " + c.Delay.String()
				}
				g.edges = append(g.edges, edge{from: prev, to: id, label: lbl})
			}
			prev = id
		}
		g.clusters = append(g.clusters, cl)
	}
	for _, it := range p.Itineraries {
		cl := cluster{id: gid("itinerary", it.Name), label: "itinerary " + it.Name}
		var ids []string
		for _, s := range it.Stops {
			id := gid("stop", it.Name, s.Name)
			shape := "round"
			label := s.Name + "\n" + s.Exchange + " / " + s.RoutingKey
			if s.When != "" {
				shape = "diamond"
				label += "\nwhen " + s.When
			}
			cl.nodes = append(cl.nodes, gnode{id: id, label: label, shape: shape})
			ids = append(ids, id)
		}
		// Each stop follows the last one before it that always applies or
		// the one before; a conditional stop can be skipped.
		for i := 1; i < len(ids); i++ {
			g.edges = append(g.edges, edge{from: ids[i-1], to: ids[i]})
			if it.Stops[i].When != "" && i+1 < len(ids) {
				g.edges = append(g.edges, edge{from: ids[i-1], to: ids[i+1], label: "skipped unless " + it.Stops[i].When, dashed: true})
			}
		}
		g.clusters = append(g.clusters, cl)
	}
	for _, s := range p.Sagas {
		cl := cluster{id: gid("saga", s.Name), label: "saga " + s.Name}
		var prev, prevComp string
		for _, st := range s.Steps {
			id := gid("saga", s.Name, st.Name)
			label := st.Name + "\n" + st.Handler
			if st.When != "" {
				label += "\nwhen " + st.When
			}
			cl.nodes = append(cl.nodes, gnode{id: id, label: label, shape: "box"})
			if prev != "" {
				g.edges = append(g.edges, edge{from: prev, to: id})
			}
			if st.Compensate != "" {
				cid := gid("saga", s.Name, st.Name, "compensate")
				cl.nodes = append(cl.nodes, gnode{id: cid, label: "undo " + st.Name + "\n" + st.Compensate, shape: "round"})
				g.edges = append(g.edges, edge{from: id, to: cid, label: "on failure", dashed: true})
				if prevComp != "" {
					g.edges = append(g.edges, edge{from: cid, to: prevComp, label: "then", dashed: true})
				}
				prevComp = cid
			}
			prev = id
		}
		g.clusters = append(g.clusters, cl)
	}
	consumers := cluster{id: "consumers", label: "consumers"}
	for _, c := range p.Consumers {
		if c.Kind != runtime.KindConsumer {
			continue
		}
		id := gid("consumer", c.ID)
		consumers.nodes = append(consumers.nodes, gnode{id: id, label: c.ID + "\nqueue " + c.Queue + "\n" + c.Handler, shape: "box"})
		for _, b := range p.Bindings {
			if b.Owner == c.ID && b.Queue == c.Queue {
				g.edges = append(g.edges, edge{from: exchangeNode(b.Exchange), to: id, label: b.RoutingKey})
			}
		}
	}
	if len(consumers.nodes) > 0 {
		g.clusters = append(g.clusters, consumers)
	}
	for _, s := range p.Schedules {
		id := gid("schedule", s.Name)
		when := s.Cron
		if when == "" {
			when = "every " + s.Every.String()
		}
		g.loose = append(g.loose, gnode{id: id, label: "schedule " + s.Name + "\n" + when + " " + s.Timezone, shape: "stadium"})
		target := ""
		kind, name, _ := strings.Cut(s.Target, " ")
		switch kind {
		case "pipeline":
			if st := steps[name]; len(st) > 0 {
				target = gid("step", name, st[0].Step)
			}
		case "saga":
			for _, sg := range p.Sagas {
				if sg.Name == name && len(sg.Steps) > 0 {
					target = gid("saga", name, sg.Steps[0].Name)
				}
			}
		case "itinerary":
			for _, it := range p.Itineraries {
				if it.Name == name && len(it.Stops) > 0 {
					target = gid("stop", name, it.Stops[0].Name)
				}
			}
		case "exchange":
			exName, _, _ := strings.Cut(name, " key ")
			target = exchangeNode(exName)
		}
		if target != "" {
			g.edges = append(g.edges, edge{from: id, to: target, label: "sends"})
		}
	}
	return g
}

func mermaidLabel(s string) string {
	s = strings.ReplaceAll(s, `"`, "#quot;")
	return strings.ReplaceAll(s, "\n", "<br/>")
}

func mermaidNode(n gnode) string {
	l := mermaidLabel(n.label)
	switch n.shape {
	case "round":
		return fmt.Sprintf("%s(\"%s\")", n.id, l)
	case "diamond":
		return fmt.Sprintf("%s{\"%s\"}", n.id, l)
	case "stadium":
		return fmt.Sprintf("%s([\"%s\"])", n.id, l)
	}
	return fmt.Sprintf("%s[\"%s\"]", n.id, l)
}

// mermaid renders the flows as a Mermaid flowchart.
func mermaid(p *runtime.Plan) string {
	g := buildGraph(p)
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	for _, n := range g.loose {
		fmt.Fprintf(&b, "  %s\n", mermaidNode(n))
	}
	for _, c := range g.clusters {
		fmt.Fprintf(&b, "  subgraph %s[\"%s\"]\n", c.id, mermaidLabel(c.label))
		for _, n := range c.nodes {
			fmt.Fprintf(&b, "    %s\n", mermaidNode(n))
		}
		b.WriteString("  end\n")
	}
	for _, e := range g.edges {
		arrow := "-->"
		if e.dashed {
			arrow = "-.->"
		}
		if e.label != "" {
			fmt.Fprintf(&b, "  %s %s|\"%s\"| %s\n", e.from, arrow, mermaidLabel(e.label), e.to)
		} else {
			fmt.Fprintf(&b, "  %s %s %s\n", e.from, arrow, e.to)
		}
	}
	return b.String()
}

func dotLabel(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return strings.ReplaceAll(s, "\n", `\n`)
}

func dotNode(n gnode) string {
	shape := map[string]string{"box": "box", "round": "box, style=rounded", "diamond": "diamond", "stadium": "ellipse"}[n.shape]
	return fmt.Sprintf("%s [label=\"%s\", shape=%s];", n.id, dotLabel(n.label), shape)
}

// dot renders the flows as a Graphviz digraph.
func dot(p *runtime.Plan) string {
	g := buildGraph(p)
	var b strings.Builder
	b.WriteString("digraph acemq {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n")
	for _, n := range g.loose {
		fmt.Fprintf(&b, "  %s\n", dotNode(n))
	}
	for _, c := range g.clusters {
		fmt.Fprintf(&b, "  subgraph cluster_%s {\n    label=\"%s\";\n", c.id, dotLabel(c.label))
		for _, n := range c.nodes {
			fmt.Fprintf(&b, "    %s\n", dotNode(n))
		}
		b.WriteString("  }\n")
	}
	for _, e := range g.edges {
		var attrs []string
		if e.label != "" {
			attrs = append(attrs, fmt.Sprintf("label=\"%s\"", dotLabel(e.label)))
		}
		if e.dashed {
			attrs = append(attrs, "style=dashed")
		}
		if len(attrs) > 0 {
			fmt.Fprintf(&b, "  %s -> %s [%s];\n", e.from, e.to, strings.Join(attrs, ", "))
		} else {
			fmt.Fprintf(&b, "  %s -> %s;\n", e.from, e.to)
		}
	}
	b.WriteString("}\n")
	return b.String()
}
