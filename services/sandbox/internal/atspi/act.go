package atspi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
)

// More D-Bus names of AT-SPI2, for acting.
const (
	ifEditableText = "org.a11y.atspi.EditableText"
	nullPath       = "/org/a11y/atspi/null"
)

// ErrNoNode is an id that names no live object: its application has exited,
// or the object is gone.
var ErrNoNode = errors.New("no such accessible object")

// UnsupportedError is a node that cannot do what was asked; Offers says what
// it can do.
type UnsupportedError struct {
	What   string
	Offers []string
}

func (e *UnsupportedError) Error() string {
	if len(e.Offers) == 0 {
		return e.What + "; it offers nothing to act on"
	}
	return e.What + "; it offers " + strings.Join(e.Offers, ", ")
}

// DeclinedError is an act the application was asked for and refused (its
// call answered false).
type DeclinedError struct{ What string }

func (e *DeclinedError) Error() string { return "the application declined to " + e.What }

// Op is one act on a node: exactly one of Action, Text and Focus.
type Op struct {
	// Action is the name of one of the node's actions, any case.
	Action string
	// Text, when set, replaces an editable text's contents.
	Text *string
	// Focus gives the node the keyboard focus.
	Focus bool
}

// ParseID splits a node id ("bus:path", as Node.ID) into its unique bus
// name and object path. Only an application's unique name is taken: the
// bus daemon's and the registry's well-known names are not nodes.
func ParseID(id string) (bus string, path dbus.ObjectPath, err error) {
	i := strings.Index(id, ":/")
	if i <= 1 || !strings.HasPrefix(id, ":") {
		return "", "", fmt.Errorf("node id %q: want the bus name and path the tree gives, like :1.5:/org/a11y/atspi/accessible/12", id)
	}
	bus, path = id[:i], dbus.ObjectPath(id[i+1:])
	for _, part := range strings.Split(bus[1:], ".") {
		if part == "" || strings.Trim(part, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-") != "" {
			return "", "", fmt.Errorf("node id %q: %q is not a unique bus name", id, bus)
		}
	}
	if !path.IsValid() || path == nullPath {
		return "", "", fmt.Errorf("node id %q: %q is not an object path", id, path)
	}
	return bus, path, nil
}

// Act does op on the node id and returns the node as it is afterwards
// (without children); nil when the act made it go away.
func Act(ctx context.Context, conn *dbus.Conn, id string, op Op) (*Node, error) {
	bus, path, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	obj := conn.Object(bus, path)
	var is []string
	if err := obj.CallWithContext(ctx, ifAccessible+".GetInterfaces", 0).Store(&is); err != nil {
		return nil, gone(id, err)
	}
	var bits []uint32
	if err := obj.CallWithContext(ctx, ifAccessible+".GetState", 0).Store(&bits); err != nil {
		return nil, gone(id, err)
	}
	states := stateNames(bits)
	if slices.Contains(states, "defunct") {
		return nil, fmt.Errorf("node %s is defunct: %w", id, ErrNoNode)
	}
	switch {
	case op.Action != "":
		err = doAction(ctx, obj, id, op.Action, is, states)
	case op.Text != nil:
		err = setText(ctx, obj, id, *op.Text, is, states)
	case op.Focus:
		err = grabFocus(ctx, obj, id, is, states)
	default:
		return nil, errors.New("nothing to do: want an action, a text or focus")
	}
	if err != nil {
		return nil, err
	}
	w := &walker{conn: conn, tree: &Tree{}}
	n, err := w.node(ctx, ref{Bus: bus, Path: path}, 0)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Done, and gone with it (a button that closed its window).
		return nil, nil
	}
	return n, nil
}

// gone turns an error of a node's first call into ErrNoNode when it says
// the application or the object is not there.
func gone(id string, err error) error {
	var de dbus.Error
	if errors.As(err, &de) {
		switch de.Name {
		case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
			"org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownMethod",
			"org.freedesktop.DBus.Error.UnknownInterface":
			return fmt.Errorf("node %s: %w (%s)", id, ErrNoNode, de.Name)
		}
	}
	return fmt.Errorf("node %s: %w", id, err)
}

func doAction(ctx context.Context, obj dbus.BusObject, id, name string, is, states []string) error {
	if !slices.Contains(is, ifAction) {
		return &UnsupportedError{What: fmt.Sprintf("node %s has no actions", id), Offers: offers(is, states, nil)}
	}
	own, localized, err := actionList(ctx, obj)
	if err != nil {
		return gone(id, err)
	}
	// DoAction takes an index: that of the action whose own name (the one
	// the tree shows) or localized one matches.
	index := -1
	for i := range own {
		if strings.EqualFold(own[i], name) || strings.EqualFold(localized[i], name) {
			index = i
			break
		}
	}
	if index < 0 {
		return &UnsupportedError{What: fmt.Sprintf("node %s has no action %q", id, name), Offers: offers(is, states, own)}
	}
	var ok bool
	if err := obj.CallWithContext(ctx, ifAction+".DoAction", 0, int32(index)).Store(&ok); err != nil {
		return gone(id, err)
	}
	if !ok {
		return &DeclinedError{What: fmt.Sprintf("%s node %s", name, id)}
	}
	return nil
}

func setText(ctx context.Context, obj dbus.BusObject, id, text string, is, states []string) error {
	if !editable(is, states) {
		what := fmt.Sprintf("node %s has no editable text", id)
		if slices.Contains(is, ifEditableText) {
			what = fmt.Sprintf("node %s is not editable now (states %s)", id, strings.Join(states, " "))
		}
		return &UnsupportedError{What: what, Offers: offers(is, states, actionNames(ctx, obj, is))}
	}
	var ok bool
	if err := obj.CallWithContext(ctx, ifEditableText+".SetTextContents", 0, text).Store(&ok); err != nil {
		return gone(id, err)
	}
	if !ok {
		return &DeclinedError{What: fmt.Sprintf("set the text of node %s", id)}
	}
	return nil
}

func grabFocus(ctx context.Context, obj dbus.BusObject, id string, is, states []string) error {
	if !focusable(is, states) {
		return &UnsupportedError{What: fmt.Sprintf("node %s cannot take the focus", id), Offers: offers(is, states, actionNames(ctx, obj, is))}
	}
	var ok bool
	if err := obj.CallWithContext(ctx, ifComponent+".GrabFocus", 0).Store(&ok); err != nil {
		return gone(id, err)
	}
	if !ok {
		return &DeclinedError{What: fmt.Sprintf("focus node %s", id)}
	}
	return nil
}

// editable: the node takes SetTextContents. A toolkit may give a read-only
// text the interface; its states tell.
func editable(is, states []string) bool {
	return slices.Contains(is, ifEditableText) && slices.Contains(states, "editable") && !slices.Contains(states, "read_only")
}

func focusable(is, states []string) bool {
	return slices.Contains(is, ifComponent) && slices.Contains(states, "focusable")
}

// actionList reads a node's actions: each one's own name (GetName, what
// DoAction means and the tree shows; the localized one when a toolkit
// gives none) and localized name, by index.
func actionList(ctx context.Context, obj dbus.BusObject) (own, localized []string, err error) {
	var as []struct{ Name, Description, KeyBinding string }
	if err := obj.CallWithContext(ctx, ifAction+".GetActions", 0).Store(&as); err != nil {
		return nil, nil, err
	}
	for i := range min(len(as), maxActions) {
		var name string
		if err := obj.CallWithContext(ctx, ifAction+".GetName", 0, int32(i)).Store(&name); err != nil || name == "" {
			name = as[i].Name
		}
		own, localized = append(own, name), append(localized, as[i].Name)
	}
	return own, localized, nil
}

// actionNames are a node's action names, for an error that lists them.
func actionNames(ctx context.Context, obj dbus.BusObject, is []string) []string {
	if !slices.Contains(is, ifAction) {
		return nil
	}
	own, _, _ := actionList(ctx, obj)
	return own
}

// offers says what a node can be asked to do, as an act names it: its
// actions, text, focus.
func offers(is, states, actions []string) []string {
	var out []string
	for _, a := range actions {
		if a != "" {
			out = append(out, "action "+strconv.Quote(a))
		}
	}
	if editable(is, states) {
		out = append(out, "text")
	}
	if focusable(is, states) {
		out = append(out, "focus")
	}
	return out
}
