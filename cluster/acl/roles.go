package acl

import (
	"fmt"
	"strings"
)

// Role is what a token may do: one of the Role constants.
type Role string

// The roles (issue 12 §2). Each allows what the one below it allows, and
// more; RoleEvents is a narrow role beside RoleRead.
const (
	// RoleManagement may call every method, tokens and ACLs included.
	RoleManagement Role = "management"
	// RoleOperator may change and read jobs, bundles, pools, nodes and
	// cluster slots (their registration tokens included), not ACLs and not
	// take backups.
	RoleOperator Role = "operator"
	// RoleRead may call every read; registration tokens are blanked in what
	// it reads.
	RoleRead Role = "read"
	// RoleEvents may only follow the event stream (and the status channel
	// and Version a client opens first): for a dashboard or an exporter.
	RoleEvents Role = "events"
)

// Roles lists the roles, widest first.
func Roles() []Role { return []Role{RoleManagement, RoleOperator, RoleRead, RoleEvents} }

// ParseRole returns the role named s, or an error listing the roles.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles() {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, 0, 4)
	for _, r := range Roles() {
		names = append(names, string(r))
	}
	return "", fmt.Errorf("unknown role %q: want one of %s", s, strings.Join(names, ", "))
}

// Access is what a method needs of its caller.
type Access int

// What a method may need, from least to most.
const (
	// AccessNone needs no ACL token: the method has its own credentials
	// (a worker's registration token or node credential) or its own rule
	// (AclBootstrap: once).
	AccessNone Access = iota + 1
	// AccessAny needs a valid token of any role.
	AccessAny
	// AccessEvents needs a role that may follow the event stream.
	AccessEvents
	// AccessRead needs a role that may read the cluster's state.
	AccessRead
	// AccessOperate needs a role that may change jobs, bundles, pools,
	// nodes and slots.
	AccessOperate
	// AccessManage needs the management role: tokens, backups.
	AccessManage
)

// String names the access for logs.
func (a Access) String() string {
	switch a {
	case AccessNone:
		return "none"
	case AccessAny:
		return "any token"
	case AccessEvents:
		return "events"
	case AccessRead:
		return "read"
	case AccessOperate:
		return "operate"
	case AccessManage:
		return "manage"
	}
	return fmt.Sprintf("access(%d)", int(a))
}

// Allows reports whether a token of role r may make a call that needs a.
// An unknown role allows nothing that needs a token.
func (r Role) Allows(a Access) bool {
	switch a {
	case AccessNone:
		return true
	case AccessAny:
		return r.valid()
	case AccessEvents:
		return r == RoleEvents || r == RoleRead || r == RoleOperator || r == RoleManagement
	case AccessRead:
		return r == RoleRead || r == RoleOperator || r == RoleManagement
	case AccessOperate:
		return r == RoleOperator || r == RoleManagement
	case AccessManage:
		return r == RoleManagement
	}
	return false
}

func (r Role) valid() bool { _, err := ParseRole(string(r)); return err == nil }
