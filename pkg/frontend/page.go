package frontend

import (
	"encoding/base64"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A continue value names where the next page of a workspace list starts: the last id of the
// page, and which list it belongs to (the caller's own or every user's). It is opaque to
// clients (base64url), so the order a list is kept in can change without breaking them; the
// id inside is not a secret (the page showed it). The list is sorted by id and the next page
// starts after that id, so a page is stable under concurrent changes: a workspace created or
// deleted meanwhile shows up, or not, where its id sorts, and none is listed twice.
//
// A list across namespaces (ListOptions.AllNamespaces) is sorted by (namespace, id), so its
// value also carries the namespace of the page's last workspace ("scope/namespace/id"); a list
// of one namespace keeps the form it had before namespaces ("scope/id"), so values handed out
// then still work. A value of one form is refused by a list of the other, saying why.
//
// The value comes back from the caller, who can write anything into it: it only chooses where a
// list starts. Which workspaces the caller may see is decided by the caller's identity (allUsers
// is for admins only) before the value is read, never by the value.
const (
	continuePrefix = "w1."
	scopeOwn       = "own"
	scopeAll       = "all"
)

func scopeOf(allUsers bool) string {
	if allUsers {
		return scopeAll
	}
	return scopeOwn
}

// position is where a list's page ended: the namespace (only in a list across namespaces) and
// the id of its last workspace.
type position struct{ ns, id string }

// encodeContinue returns the continue value of a page of one namespace's list that ends with id.
func encodeContinue(allUsers bool, id string) string {
	return continuePrefix + base64.RawURLEncoding.EncodeToString([]byte(scopeOf(allUsers)+"/"+id))
}

// encodeContinueAcross returns the continue value of a page of a list across namespaces that
// ends with workspace id in namespace ns.
func encodeContinueAcross(allUsers bool, ns, id string) string {
	return continuePrefix + base64.RawURLEncoding.EncodeToString([]byte(scopeOf(allUsers)+"/"+ns+"/"+id))
}

// decodeContinue returns the id the next page of one namespace's list starts after, or an error
// that says what is wrong with the value and what to pass instead.
func decodeContinue(token string, allUsers bool) (string, error) {
	p, err := decodePosition(token, allUsers, false)
	return p.id, err
}

// decodePosition reads a continue value of the list that allUsers and across name: across
// namespaces (ns set) or of one namespace (ns empty).
func decodePosition(token string, allUsers, across bool) (position, error) {
	bad := func(why string) error {
		return errorf(CodeInvalid, "continue %s is not a continue value of this list (%s): pass the continue value of the previous answer unchanged, or omit continue to start from the first page", workspace.Quote(token), why)
	}
	raw, ok := strings.CutPrefix(token, continuePrefix)
	if !ok {
		return position{}, bad("it does not start with " + continuePrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return position{}, bad("it is not base64url")
	}
	parts := strings.Split(string(b), "/")
	if len(parts) < 2 || len(parts) > 3 || (parts[0] != scopeOwn && parts[0] != scopeAll) {
		return position{}, bad("it names no list")
	}
	if parts[0] != scopeOf(allUsers) {
		return position{}, errorf(CodeInvalid, "continue belongs to a list with allUsers=%t, not to this one with allUsers=%t: pass the same allUsers as on the first page", parts[0] == scopeAll, allUsers)
	}
	var p position
	switch {
	case len(parts) == 3 && !across:
		return position{}, errorf(CodeInvalid, "continue belongs to a list across namespaces (allNamespaces=true), not to this list of one namespace: pass the same allNamespaces and namespace as on the first page, or omit continue to start from the first page")
	case len(parts) == 2 && across:
		return position{}, errorf(CodeInvalid, "continue belongs to a list of one namespace, not to this list across namespaces (allNamespaces=true): pass the same allNamespaces and namespace as on the first page, or omit continue to start from the first page")
	case len(parts) == 3:
		p = position{ns: parts[1], id: parts[2]}
		if len(validation.IsDNS1123Label(p.ns)) > 0 {
			return position{}, bad("it holds no namespace")
		}
	default:
		p = position{id: parts[1]}
	}
	if workspace.ValidateID(p.id) != nil {
		return position{}, bad("it holds no workspace id")
	}
	return p, nil
}
