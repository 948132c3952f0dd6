package schemacompat

import (
	"fmt"
	"slices"

	"github.com/hamba/avro/v2"
)

// compareAvro asks hamba/avro/v2's SchemaCompatibility whether reader reads
// writer's data (Avro schema resolution), and when it does not, walks both
// schemas to the first field where it does not, so the answer names a
// field rather than only a type.
func compareAvro(reader, writer avro.Schema) *Problem {
	c := avro.NewSchemaCompatibility()
	if c.Compatible(reader, writer) == nil {
		return nil
	}
	root := "(root)"
	if n, ok := deref(reader).(avro.NamedSchema); ok {
		root = n.FullName()
	}
	w := avroWalk{c: c, seen: map[[2][32]byte]bool{}}
	return w.locate(reader, writer, root)
}

type avroWalk struct {
	c    *avro.SchemaCompatibility
	seen map[[2][32]byte]bool
}

func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

// locate returns where under path reader fails to read writer, given that
// it does.
func (w avroWalk) locate(reader, writer avro.Schema, path string) *Problem {
	reader, writer = deref(reader), deref(writer)
	err := w.c.Compatible(reader, writer)
	if err == nil {
		return nil
	}
	key := [2][32]byte{reader.Fingerprint(), writer.Fingerprint()}
	if w.seen[key] {
		return &Problem{Path: path, Reason: err.Error()}
	}
	w.seen[key] = true
	here := &Problem{Path: path, Reason: err.Error()}

	switch {
	case reader.Type() == avro.Record && writer.Type() == avro.Record:
		r, wr := reader.(*avro.RecordSchema), writer.(*avro.RecordSchema)
		if r.Name() != wr.Name() && !slices.Contains(r.Aliases(), wr.FullName()) {
			return &Problem{Path: path, Reason: fmt.Sprintf("the record is named %s, and the writer's %s (add the writer's name to the reader's aliases)", r.FullName(), wr.FullName())}
		}
		for _, f := range r.Fields() {
			wf := writerField(wr, f)
			at := path + "." + f.Name()
			if wf == nil {
				if !f.HasDefault() {
					return &Problem{Path: at, Reason: "the reader has this field without a default, and the writer does not write it (give it a default)"}
				}
				continue
			}
			if p := w.locate(f.Type(), wf.Type(), at); p != nil {
				return p
			}
		}
	case reader.Type() == avro.Array && writer.Type() == avro.Array:
		return w.locate(reader.(*avro.ArraySchema).Items(), writer.(*avro.ArraySchema).Items(), path+"[]")
	case reader.Type() == avro.Map && writer.Type() == avro.Map:
		return w.locate(reader.(*avro.MapSchema).Values(), writer.(*avro.MapSchema).Values(), path+"{}")
	case reader.Type() == avro.Enum && writer.Type() == avro.Enum:
		r, wr := reader.(*avro.EnumSchema), writer.(*avro.EnumSchema)
		for _, sym := range wr.Symbols() {
			if !slices.Contains(r.Symbols(), sym) {
				return &Problem{Path: path, Reason: fmt.Sprintf("the writer's symbol %s is not in the reader's enum %s, which has no default", sym, r.FullName())}
			}
		}
	case reader.Type() == avro.Fixed && writer.Type() == avro.Fixed:
		r, wr := reader.(*avro.FixedSchema), writer.(*avro.FixedSchema)
		if r.Size() != wr.Size() {
			return &Problem{Path: path, Reason: fmt.Sprintf("the fixed size changed from %d to %d", wr.Size(), r.Size())}
		}
	case writer.Type() == avro.Union:
		for _, branch := range writer.(*avro.UnionSchema).Types() {
			if w.c.Compatible(reader, branch) != nil {
				if reader.Type() == avro.Union {
					return w.inUnion(reader.(*avro.UnionSchema), branch, path)
				}
				return &Problem{Path: path, Reason: fmt.Sprintf("the writer may write its union's branch %s, which the reader's %s cannot read", typeName(branch), typeName(reader))}
			}
		}
	case reader.Type() == avro.Union:
		return w.inUnion(reader.(*avro.UnionSchema), writer, path)
	case reader.Type() != writer.Type():
		return &Problem{Path: path, Reason: fmt.Sprintf("the type changed from %s to %s, which Avro does not promote", typeName(writer), typeName(reader))}
	}
	return here
}

// writerField is the writer's field a reader's field reads: by name, or by
// one of the reader field's aliases.
func writerField(wr *avro.RecordSchema, f *avro.Field) *avro.Field {
	for _, wf := range wr.Fields() {
		if wf.Name() == f.Name() || slices.Contains(f.Aliases(), wf.Name()) {
			return wf
		}
	}
	return nil
}

// inUnion locates why no branch of the reader's union reads writer: inside
// the branch of writer's type and name, when the reader has one.
func (w avroWalk) inUnion(r *avro.UnionSchema, writer avro.Schema, path string) *Problem {
	writer = deref(writer)
	for _, b := range r.Types() {
		b = deref(b)
		if b.Type() != writer.Type() {
			continue
		}
		bn, ok1 := b.(avro.NamedSchema)
		wn, ok2 := writer.(avro.NamedSchema)
		if ok1 && ok2 && bn.Name() != wn.Name() {
			continue
		}
		return w.locate(b, writer, path)
	}
	return &Problem{Path: path, Reason: fmt.Sprintf("no branch of the reader's union reads the writer's %s", typeName(writer))}
}

func typeName(s avro.Schema) string {
	s = deref(s)
	if n, ok := s.(avro.NamedSchema); ok {
		return fmt.Sprintf("%s %s", s.Type(), n.FullName())
	}
	return string(s.Type())
}
