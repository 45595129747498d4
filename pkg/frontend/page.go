package frontend

import (
	"encoding/base64"
	"strings"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A continue value names where the next page of a workspace list starts: the last id of the
// page, and which list it belongs to (the caller's own or every user's). It is opaque to
// clients (base64url), so the order a list is kept in can change without breaking them; the
// id inside is not a secret (the page showed it). The list is sorted by id and the next page
// starts after that id, so a page is stable under concurrent changes: a workspace created or
// deleted meanwhile shows up, or not, where its id sorts, and none is listed twice.
//
// The value comes back from the caller, who can write anything into it: it only chooses where a
// list starts. Which workspaces the caller may see is decided by the caller's identity (allUsers
// is for admins only) before the value is read, never by the value.
const (
	continuePrefix  = "w1."
	scopeOwn        = "own"
	scopeAll        = "all"
	maxEchoContinue = 80 // an error quotes at most this much of a bad continue value
)

func scopeOf(allUsers bool) string {
	if allUsers {
		return scopeAll
	}
	return scopeOwn
}

// encodeContinue returns the continue value of a page that ends with id.
func encodeContinue(allUsers bool, id string) string {
	return continuePrefix + base64.RawURLEncoding.EncodeToString([]byte(scopeOf(allUsers)+"/"+id))
}

// decodeContinue returns the id the next page starts after, or an error that says what is wrong
// with the value and what to pass instead.
func decodeContinue(token string, allUsers bool) (string, error) {
	bad := func(why string) error {
		shown := token
		if len(shown) > maxEchoContinue {
			shown = shown[:maxEchoContinue] + "..."
		}
		return errorf(CodeInvalid, "continue %q is not a continue value of this list (%s): pass the continue value of the previous answer unchanged, or omit continue to start from the first page", shown, why)
	}
	raw, ok := strings.CutPrefix(token, continuePrefix)
	if !ok {
		return "", bad("it does not start with " + continuePrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return "", bad("it is not base64url")
	}
	scope, id, ok := strings.Cut(string(b), "/")
	if !ok || (scope != scopeOwn && scope != scopeAll) {
		return "", bad("it names no list")
	}
	if scope != scopeOf(allUsers) {
		return "", errorf(CodeInvalid, "continue belongs to a list with allUsers=%t, not to this one with allUsers=%t: pass the same allUsers as on the first page", scope == scopeAll, allUsers)
	}
	if workspace.ValidateID(id) != nil {
		return "", bad("it holds no workspace id")
	}
	return id, nil
}
