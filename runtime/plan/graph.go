package plan

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Graph is the drawing of a plan, independent of the output language.
type Graph struct {
	Clusters []Cluster
	Edges    []Edge
	Loose    []Node // nodes outside any cluster (exchanges, schedules)
}

type Cluster struct {
	ID, Label string
	Nodes     []Node
}

type Node struct {
	ID, Label string
	Shape     string // box, round, diamond, stadium
	// Consumer is the registry id of the consumer group the node stands
	// for (a step, a saga step or its compensation, a consumer), empty for
	// the others: the status page shows that group's numbers on it.
	Consumer string
}

type Edge struct {
	From, To, Label string
	Dashed          bool
}

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9_]+`)

func gid(parts ...string) string {
	return idUnsafe.ReplaceAllString(strings.Join(parts, "__"), "_")
}

// BuildGraph draws from the plan, so the picture shows what `run` would do.
func BuildGraph(p *Plan) Graph {
	var g Graph
	exchanges := map[string]bool{}
	exchangeNode := func(name string) string {
		id := gid("x", name)
		if !exchanges[name] {
			exchanges[name] = true
			g.Loose = append(g.Loose, Node{ID: id, Label: "exchange " + name, Shape: "stadium"})
		}
		return id
	}
	steps := map[string][]Consumer{}
	for _, c := range p.Consumers {
		if c.Kind == KindStep {
			steps[c.Pipeline] = append(steps[c.Pipeline], c)
		}
	}
	for _, st := range steps {
		slices.SortFunc(st, func(a, b Consumer) int { return a.Position - b.Position })
	}
	for _, pl := range p.Pipelines {
		cl := Cluster{ID: gid("pipeline", pl.Name), Label: "pipeline " + pl.Name}
		var prev string
		for _, c := range steps[pl.Name] {
			id := gid("step", pl.Name, c.Step)
			label := c.Step + "\n" + c.Handler
			if c.Output != "" {
				label += "\n→ " + c.Output
			}
			cl.Nodes = append(cl.Nodes, Node{ID: id, Label: label, Shape: "box", Consumer: c.ID})
			if prev != "" {
				lbl := ""
				if c.Delay > 0 {
					lbl = "after " + c.Delay.String()
				}
				g.Edges = append(g.Edges, Edge{From: prev, To: id, Label: lbl})
			}
			prev = id
		}
		g.Clusters = append(g.Clusters, cl)
	}
	for _, it := range p.Itineraries {
		cl := Cluster{ID: gid("itinerary", it.Name), Label: "itinerary " + it.Name}
		var ids []string
		for _, s := range it.Stops {
			id := gid("stop", it.Name, s.Name)
			shape := "round"
			label := s.Name + "\n" + s.Exchange + " / " + s.RoutingKey
			if s.When != "" {
				shape = "diamond"
				label += "\nwhen " + s.When
			}
			cl.Nodes = append(cl.Nodes, Node{ID: id, Label: label, Shape: shape})
			ids = append(ids, id)
		}
		// Each stop follows the last one before it that always applies or
		// the one before; a conditional stop can be skipped.
		for i := 1; i < len(ids); i++ {
			g.Edges = append(g.Edges, Edge{From: ids[i-1], To: ids[i]})
			if it.Stops[i].When != "" && i+1 < len(ids) {
				g.Edges = append(g.Edges, Edge{From: ids[i-1], To: ids[i+1], Label: "skipped unless " + it.Stops[i].When, Dashed: true})
			}
		}
		g.Clusters = append(g.Clusters, cl)
	}
	for _, s := range p.Sagas {
		cl := Cluster{ID: gid("saga", s.Name), Label: "saga " + s.Name}
		if s.Timeout > 0 {
			cl.Label += fmt.Sprintf(" (timeout %s)", s.Timeout)
		}
		var prev, prevComp string
		for _, st := range s.Steps {
			id := gid("saga", s.Name, st.Name)
			label := st.Name + "\n" + st.Handler
			if st.When != "" {
				label += "\nwhen " + st.When
			}
			cl.Nodes = append(cl.Nodes, Node{ID: id, Label: label, Shape: "box", Consumer: SagaStepConsumerID(s.Name, st.Name)})
			if prev != "" {
				g.Edges = append(g.Edges, Edge{From: prev, To: id})
			}
			if st.Compensate != "" {
				cid := gid("saga", s.Name, st.Name, "compensate")
				cl.Nodes = append(cl.Nodes, Node{ID: cid, Label: "undo " + st.Name + "\n" + st.Compensate, Shape: "round", Consumer: CompensateConsumerID(s.Name, st.Name)})
				g.Edges = append(g.Edges, Edge{From: id, To: cid, Label: "on failure", Dashed: true})
				if prevComp != "" {
					g.Edges = append(g.Edges, Edge{From: cid, To: prevComp, Label: "then", Dashed: true})
				}
				prevComp = cid
			}
			prev = id
		}
		g.Clusters = append(g.Clusters, cl)
	}
	consumers := Cluster{ID: "consumers", Label: "consumers"}
	for _, c := range p.Consumers {
		if c.Kind != KindConsumer {
			continue
		}
		id := gid("consumer", c.ID)
		consumers.Nodes = append(consumers.Nodes, Node{ID: id, Label: c.ID + "\nqueue " + c.Queue + "\n" + c.Handler, Shape: "box", Consumer: c.ID})
		for _, b := range p.Bindings {
			if b.Owner == c.ID && b.Queue == c.Queue {
				g.Edges = append(g.Edges, Edge{From: exchangeNode(b.Exchange), To: id, Label: b.RoutingKey})
			}
		}
	}
	if len(consumers.Nodes) > 0 {
		g.Clusters = append(g.Clusters, consumers)
	}
	for _, s := range p.Schedules {
		id := gid("schedule", s.Name)
		when := s.Cron
		if when == "" {
			when = "every " + s.Every.String()
		}
		g.Loose = append(g.Loose, Node{ID: id, Label: "schedule " + s.Name + "\n" + when + " " + s.Timezone, Shape: "stadium"})
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
			g.Edges = append(g.Edges, Edge{From: id, To: target, Label: "sends"})
		}
	}
	return g
}

func mermaidLabel(s string) string {
	s = strings.ReplaceAll(s, `"`, "#quot;")
	return strings.ReplaceAll(s, "\n", "<br/>")
}

func mermaidNode(n Node) string {
	l := mermaidLabel(n.Label)
	switch n.Shape {
	case "round":
		return fmt.Sprintf("%s(\"%s\")", n.ID, l)
	case "diamond":
		return fmt.Sprintf("%s{\"%s\"}", n.ID, l)
	case "stadium":
		return fmt.Sprintf("%s([\"%s\"])", n.ID, l)
	}
	return fmt.Sprintf("%s[\"%s\"]", n.ID, l)
}

// Mermaid renders the flows as a Mermaid flowchart.
func (p *Plan) Mermaid() string {
	g := BuildGraph(p)
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	for _, n := range g.Loose {
		fmt.Fprintf(&b, "  %s\n", mermaidNode(n))
	}
	for _, c := range g.Clusters {
		fmt.Fprintf(&b, "  subgraph %s[\"%s\"]\n", c.ID, mermaidLabel(c.Label))
		for _, n := range c.Nodes {
			fmt.Fprintf(&b, "    %s\n", mermaidNode(n))
		}
		b.WriteString("  end\n")
	}
	for _, e := range g.Edges {
		arrow := "-->"
		if e.Dashed {
			arrow = "-.->"
		}
		if e.Label != "" {
			fmt.Fprintf(&b, "  %s %s|\"%s\"| %s\n", e.From, arrow, mermaidLabel(e.Label), e.To)
		} else {
			fmt.Fprintf(&b, "  %s %s %s\n", e.From, arrow, e.To)
		}
	}
	return b.String()
}

func dotLabel(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return strings.ReplaceAll(s, "\n", `\n`)
}

func dotNode(n Node) string {
	shape := map[string]string{"box": "box", "round": "box, style=rounded", "diamond": "diamond", "stadium": "ellipse"}[n.Shape]
	return fmt.Sprintf("%s [label=\"%s\", shape=%s];", n.ID, dotLabel(n.Label), shape)
}

// DOT renders the flows as a Graphviz digraph.
func (p *Plan) DOT() string {
	g := BuildGraph(p)
	var b strings.Builder
	b.WriteString("digraph acemq {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n")
	for _, n := range g.Loose {
		fmt.Fprintf(&b, "  %s\n", dotNode(n))
	}
	for _, c := range g.Clusters {
		fmt.Fprintf(&b, "  subgraph cluster_%s {\n    label=\"%s\";\n", c.ID, dotLabel(c.Label))
		for _, n := range c.Nodes {
			fmt.Fprintf(&b, "    %s\n", dotNode(n))
		}
		b.WriteString("  }\n")
	}
	for _, e := range g.Edges {
		var attrs []string
		if e.Label != "" {
			attrs = append(attrs, fmt.Sprintf("label=\"%s\"", dotLabel(e.Label)))
		}
		if e.Dashed {
			attrs = append(attrs, "style=dashed")
		}
		if len(attrs) > 0 {
			fmt.Fprintf(&b, "  %s -> %s [%s];\n", e.From, e.To, strings.Join(attrs, ", "))
		} else {
			fmt.Fprintf(&b, "  %s -> %s;\n", e.From, e.To)
		}
	}
	b.WriteString("}\n")
	return b.String()
}
