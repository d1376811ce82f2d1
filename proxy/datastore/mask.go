package datastore

import (
	"strings"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"
)

// Property masks, as Firestore in Datastore mode applies them (the
// production service; the legacy emulator ignores a read's mask and
// applies a write's differently). A mask's paths name properties inside
// entity values too: "a.b" is the property b of the entity value a. A
// read's mask keeps exactly what its paths name (none, for a mask with
// no paths), and a property some path only enters keeps just what is
// named inside it, or goes if nothing is; no path enters an array or a
// value that is not an entity. A write's mask replaces, in the entity
// stored (or in an empty one), each path's value with the written
// entity's, or removes it where the written entity has none, creating
// the entity values a path needs on the way.

// maskPath parses a path as the service does: names separated by '.',
// each unquoted ([a-zA-Z_][a-zA-Z_0-9]*) or in backquotes, where a
// backslash takes the next character as it is.
func maskPath(p string) ([]string, error) {
	if p == "" {
		return nil, invalid("Invalid empty property path string.")
	}
	bad := invalid("Invalid property path \"%s\". Unquoted property paths must match regex ([a-zA-Z_][a-zA-Z_0-9]*), and quoted property paths must match regex (`(?:[^`\\\\]|(?:\\\\.))+`)", p)
	var names []string
	for i := 0; ; i++ {
		var name string
		var ok bool
		if name, i, ok = maskName(p, i); !ok {
			return nil, bad
		}
		names = append(names, name)
		if i == len(p) {
			return names, nil
		}
		if p[i] != '.' {
			return nil, bad
		}
	}
}

// maskName reads the name of path p that starts at i, and returns it and
// where it ends.
func maskName(p string, i int) (string, int, bool) {
	if i < len(p) && p[i] == '`' {
		var b strings.Builder
		for i++; i < len(p) && p[i] != '`'; i++ {
			if p[i] == '\\' {
				if i++; i == len(p) {
					return "", i, false
				}
			}
			b.WriteByte(p[i])
		}
		if i == len(p) || b.Len() == 0 {
			return "", i, false
		}
		return b.String(), i + 1, true
	}
	j := i
	for j < len(p) && (p[j] == '_' || 'a' <= p[j] && p[j] <= 'z' || 'A' <= p[j] && p[j] <= 'Z' || j > i && '0' <= p[j] && p[j] <= '9') {
		j++
	}
	return p[i:j], j, j > i
}

// maskPaths parses every path of m.
func maskPaths(m *datastorepb.PropertyMask) ([][]string, error) {
	paths := make([][]string, len(m.GetPaths()))
	for i, p := range m.GetPaths() {
		var err error
		if paths[i], err = maskPath(p); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// readMask is a read's property mask: for each name kept, nil to keep
// the whole value, or the mask of what to keep inside it. A nil readMask
// (no mask in the request) keeps everything.
type readMask map[string]readMask

// newReadMask parses m (nil: no mask).
func newReadMask(m *datastorepb.PropertyMask) (readMask, error) {
	if m == nil {
		return nil, nil
	}
	paths, err := maskPaths(m)
	if err != nil {
		return nil, err
	}
	root := readMask{}
	for _, names := range paths {
		node := root
		for i, name := range names {
			child, seen := node[name]
			switch {
			case seen && child == nil: // kept whole already
			case i == len(names)-1:
				node[name] = nil
			case !seen:
				child = readMask{}
				node[name] = child
			}
			if child == nil {
				break
			}
			node = child
		}
	}
	return root, nil
}

// apply keeps only what m names of e's properties (nothing for a nil e).
func (m readMask) apply(e *datastorepb.Entity) {
	if m == nil || e == nil {
		return
	}
	e.Properties = m.keep(e.GetProperties())
}

func (m readMask) keep(props map[string]*datastorepb.Value) map[string]*datastorepb.Value {
	out := map[string]*datastorepb.Value{}
	for name, inside := range m {
		v, ok := props[name]
		switch {
		case !ok:
		case inside == nil:
			out[name] = v
		case v.GetEntityValue() != nil:
			if kept := inside.keep(v.GetEntityValue().GetProperties()); len(kept) > 0 {
				sub := &datastorepb.Entity{Key: v.GetEntityValue().GetKey(), Properties: kept}
				out[name] = &datastorepb.Value{ValueType: &datastorepb.Value_EntityValue{EntityValue: sub},
					Meaning: v.GetMeaning(), ExcludeFromIndexes: v.GetExcludeFromIndexes()}
			}
		}
	}
	return out
}

// merge is a masked write of next over cur (nil: the entity does not
// exist): cur with each path's value replaced by next's, or removed where
// next has none.
func merge(cur, next *datastorepb.Entity, paths [][]string) *datastorepb.Entity {
	out := &datastorepb.Entity{}
	if cur != nil {
		out = proto.Clone(cur).(*datastorepb.Entity)
	}
	out.Key = next.Key
	for _, names := range paths {
		if v, ok := valueAt(next.GetProperties(), names); ok {
			setAt(out, names, v)
		} else {
			removeAt(out.GetProperties(), names)
		}
	}
	return out
}

// valueAt is the value at names inside props, if there is one.
func valueAt(props map[string]*datastorepb.Value, names []string) (*datastorepb.Value, bool) {
	for _, name := range names[:len(names)-1] {
		if props = props[name].GetEntityValue().GetProperties(); props == nil {
			return nil, false
		}
	}
	v, ok := props[names[len(names)-1]]
	return v, ok
}

// setAt puts v at names inside e, making each value on the way an entity
// value (an empty one where there was none, or another kind of value).
func setAt(e *datastorepb.Entity, names []string, v *datastorepb.Value) {
	for _, name := range names[:len(names)-1] {
		if e.Properties == nil {
			e.Properties = map[string]*datastorepb.Value{}
		}
		sub := e.Properties[name].GetEntityValue()
		if sub == nil {
			sub = &datastorepb.Entity{}
			e.Properties[name] = &datastorepb.Value{ValueType: &datastorepb.Value_EntityValue{EntityValue: sub}}
		}
		e = sub
	}
	if e.Properties == nil {
		e.Properties = map[string]*datastorepb.Value{}
	}
	e.Properties[names[len(names)-1]] = v
}

// removeAt removes the value at names inside props, if there is one.
func removeAt(props map[string]*datastorepb.Value, names []string) {
	for _, name := range names[:len(names)-1] {
		if props = props[name].GetEntityValue().GetProperties(); props == nil {
			return
		}
	}
	delete(props, names[len(names)-1])
}
