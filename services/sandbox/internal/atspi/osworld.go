package atspi

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// osworldNS are the namespaces of OSWorld's accessibility tree on Linux
// (its desktop_env server's "ubuntu" map), in the order it declares them.
var osworldNS = []struct{ prefix, uri string }{
	{"st", "https://accessibility.ubuntu.example.org/ns/state"},
	{"attr", "https://accessibility.ubuntu.example.org/ns/attributes"},
	{"cp", "https://accessibility.ubuntu.example.org/ns/component"},
	{"doc", "https://accessibility.ubuntu.example.org/ns/document"},
	{"docattr", "https://accessibility.ubuntu.example.org/ns/document/attributes"},
	{"txt", "https://accessibility.ubuntu.example.org/ns/text"},
	{"val", "https://accessibility.ubuntu.example.org/ns/value"},
	{"act", "https://accessibility.ubuntu.example.org/ns/action"},
}

// OSWorldXML writes a tree (walked with Limits.Export) as the XML of
// OSWorld's accessibility_tree observation, so that harnesses written for
// it (its XPath queries, its linearisation for the model) read deskgrid's
// tree as their own: a desktop-frame element declaring the namespaces, an
// element per node named for its role with spaces as dashes
// ("push-button"; "unknown" when it has none), holding
//   - name, always;
//   - st:STATE="true" for each state;
//   - attr:KEY=VALUE for each object attribute;
//   - cp:screencoord="(x, y)" and cp:size="(w, h)" when it is visible and
//     showing and has extents;
//   - image="true" and selection="true" for those interfaces;
//   - val:value, val:min, val:max and val:step for a value, as Python
//     writes floats;
//   - act:NAME_desc and act:NAME_kb for each action;
//
// and its text (without U+FFFC and U+FFFD) as content. Attributes whose
// name is not an XML name are left out (lxml would refuse them), as are
// characters XML cannot hold.
func OSWorldXML(t *Tree) string {
	var b strings.Builder
	b.WriteString("<desktop-frame")
	for _, ns := range osworldNS {
		fmt.Fprintf(&b, ` xmlns:%s="%s"`, ns.prefix, ns.uri)
	}
	if len(t.Applications) == 0 {
		b.WriteString("/>")
		return b.String()
	}
	b.WriteByte('>')
	for _, a := range t.Applications {
		writeOSWorld(&b, a)
	}
	b.WriteString("</desktop-frame>")
	return b.String()
}

// xmlAttrs are an element's attributes in order; setting one again keeps
// its place and takes the new value, as a Python dict does.
type xmlAttrs struct {
	names  []string
	values map[string]string
}

func (a *xmlAttrs) set(name, value string) {
	if a.values == nil {
		a.values = map[string]string{}
	}
	local := name
	if i := strings.IndexByte(name, ':'); i >= 0 {
		local = name[i+1:]
	}
	if !isXMLName(local) {
		return
	}
	if _, ok := a.values[name]; !ok {
		a.names = append(a.names, name)
	}
	a.values[name] = value
}

var dropUnknownObjects = strings.NewReplacer("\ufffc", "", "\ufffd", "")

func writeOSWorld(b *strings.Builder, n *Node) {
	tag := osworldTag(n.Role)
	var attrs xmlAttrs
	attrs.set("name", n.Name)
	for _, st := range n.States {
		attrs.set("st:"+st, "true")
	}
	keys := make([]string, 0, len(n.Attributes))
	for k := range n.Attributes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		attrs.set("attr:"+k, n.Attributes[k])
	}
	if r := n.Bounds; r != nil && slices.Contains(n.States, "visible") && slices.Contains(n.States, "showing") {
		attrs.set("cp:screencoord", fmt.Sprintf("(%d, %d)", r.X, r.Y))
		attrs.set("cp:size", fmt.Sprintf("(%d, %d)", r.Width, r.Height))
	}
	if n.Image {
		attrs.set("image", "true")
	}
	if n.Selection {
		attrs.set("selection", "true")
	}
	if n.HasValue {
		attrs.set("val:value", pyFloat(n.Value))
		attrs.set("val:min", pyFloat(n.MinValue))
		attrs.set("val:max", pyFloat(n.MaxValue))
		attrs.set("val:step", pyFloat(n.Step))
	}
	for _, a := range n.ActionDetails {
		name := strings.ReplaceAll(a.Name, " ", "-")
		attrs.set("act:"+name+"_desc", a.Description)
		attrs.set("act:"+name+"_kb", a.KeyBinding)
	}
	b.WriteByte('<')
	b.WriteString(tag)
	for _, name := range attrs.names {
		b.WriteByte(' ')
		b.WriteString(name)
		b.WriteString(`="`)
		escapeXML(b, attrs.values[name], true)
		b.WriteByte('"')
	}
	text := dropUnknownObjects.Replace(n.Text)
	if text == "" && len(n.Children) == 0 {
		b.WriteString("/>")
		return
	}
	b.WriteByte('>')
	escapeXML(b, text, false)
	for _, c := range n.Children {
		writeOSWorld(b, c)
	}
	b.WriteString("</")
	b.WriteString(tag)
	b.WriteByte('>')
}

// osworldTag is a role as an element name: spaces as dashes, anything an
// XML name cannot hold as a dash too.
func osworldTag(role string) string {
	role = strings.TrimSpace(role)
	if role == "" {
		return "unknown"
	}
	tag := []rune(strings.ReplaceAll(role, " ", "-"))
	for i, r := range tag {
		if !isNameRune(r, i == 0) {
			tag[i] = '-'
		}
	}
	if !isNameRune(tag[0], true) {
		return "unknown"
	}
	return string(tag)
}

// isXMLName reports whether s is a name without a colon (an NCName).
func isXMLName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !isNameRune(r, i == 0) {
			return false
		}
	}
	return true
}

func isNameRune(r rune, first bool) bool {
	switch {
	case r == '_' || unicode.IsLetter(r):
		return true
	case first:
		return false
	}
	return r == '-' || r == '.' || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r)
}

// escapeXML writes s as XML character data, or as an attribute value
// with attr (newlines and tabs as references, as lxml writes them);
// characters XML cannot hold are left out.
func escapeXML(b *strings.Builder, s string, attr bool) {
	for _, r := range s {
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"' && attr:
			b.WriteString("&quot;")
		case r == '\r':
			b.WriteString("&#13;")
		case r == '\n' && attr:
			b.WriteString("&#10;")
		case r == '\t' && attr:
			b.WriteString("&#9;")
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20, r >= 0xd800 && r <= 0xdfff, r == 0xfffe, r == 0xffff:
			// Not an XML character.
		default:
			b.WriteRune(r)
		}
	}
}

// pyFloat writes f as Python's str(float) does: the shortest digits that
// read back as f, in positional notation with at least one decimal when
// its exponent is from -4 to 15, in scientific notation otherwise.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if f != 0 && (exp < -4 || exp >= 16) {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
