package acl

import (
	"strings"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// ManagerService is the full name of the API service the table covers.
var ManagerService = managerpb.Manager_ServiceDesc.ServiceName

// methodAccess is THE table: what each method of norsk.api.manager.Manager
// needs (issue 12 §2). A method missing here is refused to every caller
// with ACLs on (deny by default), and TestMethodTable_CoversManager fails
// for it, so a new RPC cannot ship without a line here.
//
// Reads need AccessRead, changes AccessOperate. SnapshotSave needs
// AccessManage: a backup holds every registration token and node
// credential. ClusterMemberRegister is the worker's: it carries its own
// single-use registration token or node credential, not an ACL token;
// with mutual TLS it is also the only method a connection without a client
// certificate may call (a --self-signed worker's), decided before this
// table in cluster/agent clientcert_guard.go.
// ListClusterNodes is a read, but blanks the registration tokens for a
// role without AccessOperate (the gateway).
var methodAccess = map[string]Access{
	// The status channel and Version are what a client opens first.
	"CreateStatusChannel": AccessAny,
	"Version":             AccessAny,
	"EventStream":         AccessEvents,

	"CreateJob":   AccessOperate,
	"UpdateJob":   AccessOperate,
	"DeleteJob":   AccessOperate,
	"StartJob":    AccessOperate,
	"StopJob":     AccessOperate,
	"CompleteJob": AccessOperate,
	"StopOrphan":  AccessOperate,
	"JobSearch":   AccessRead,
	"JobById":     AccessRead,

	// Moves (issue 13 §2).
	"MigrateJob":     AccessOperate,
	"AbortMigration": AccessOperate,

	"CreateAwsNode":         AccessOperate,
	"CreateOciNode":         AccessOperate,
	"UpdatePhysicalNode":    AccessOperate,
	"TerminateNode":         AccessOperate,
	"CreateMockNode":        AccessOperate,
	"CordonNode":            AccessOperate,
	"UncordonNode":          AccessOperate,
	"DrainNode":             AccessOperate,
	"ListNodes":             AccessRead,
	"GetPlacement":          AccessRead,
	"RegisterClusterNode":   AccessOperate,
	"DeregisterClusterNode": AccessOperate,
	"ListClusterNodes":      AccessRead,
	"ClusterMemberRegister": AccessNone,
	"ClusterMembers":        AccessRead,

	"CreateBundle":   AccessOperate,
	"UpdateBundle":   AccessOperate,
	"DeleteBundle":   AccessOperate,
	"StartBundleJob": AccessOperate,
	"StopBundleJob":  AccessOperate,
	"GetBundle":      AccessRead,
	"ListBundles":    AccessRead,

	"CreatePool": AccessOperate,
	"UpdatePool": AccessOperate,
	"DeletePool": AccessOperate,
	"GetPool":    AccessRead,
	"ListPools":  AccessRead,

	"SnapshotSave": AccessManage,

	"AclBootstrap":   AccessNone,
	"AclTokenCreate": AccessManage,
	"AclTokenList":   AccessManage,
	"AclTokenRevoke": AccessManage,
	"AclTokenSelf":   AccessAny,

	"AppendAuditEntry": AccessOperate,
	"ListAuditEntries": AccessRead,
}

// MethodAccess returns what the gRPC method fullMethod
// ("/norsk.api.manager.Manager/CreateJob") needs. inManager is false for a
// method of another service (health, reflection, the managers' internal
// Cluster service), which the table does not cover; ok is false for a
// Manager method missing from the table.
func MethodAccess(fullMethod string) (a Access, inManager, ok bool) {
	service, method, found := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !found || service != ManagerService {
		return 0, false, false
	}
	a, ok = methodAccess[method]
	return a, true, ok
}
