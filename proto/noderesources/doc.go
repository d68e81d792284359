// Package noderesources holds the rules of norsk.api.common.NodeResources
// that both sides of the worker protocol apply: the default capacity a
// worker derives from its cores, the validation of what a worker reports
// (its flags before it starts; the manager again at registration and
// hello), and how a node's failure domain is resolved. It imports only
// the generated protocol packages, so the worker does not pull in the
// manager's actors (the same reason proto/workerauth is apart).
// docs/design/nodes-capacity.md explains the choices.
package noderesources
