package template

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The allow-list of compose keys (issue 14 §1): exactly what a product
// stack needs and the Docker runtime can run. compose-go's model accepts
// (and would silently drop or apply) many more keys, so the raw YAML
// mapping is checked against this tree before compose-go sees it; a key
// outside it refuses the template version, naming its path. Keys starting
// with "x-" (compose extensions) are ignored everywhere.
//
// A node describes what a value may hold:
//   - any: anything below it (a scalar, a list, a mapping of names);
//   - keys: a mapping with only these keys (nil node: anything below);
//   - names: a mapping from names the author chooses to values of this
//     node (services, volumes, depends_on…);
//   - items: list elements that are mappings must match this node; plain
//     scalars in a list are always accepted (compose's short syntax);
//   - values: for a key whose literal value must be one of these (a value
//     with a "$" is checked after interpolation instead).
type node struct {
	any    bool
	keys   map[string]*node
	names  *node
	items  *node
	values []string
}

// composeConditions are compose's depends_on conditions, in the order of
// ConditionStarted, ConditionHealthy, ConditionCompletedSuccessfully.
var composeConditions = [...]string{"service_started", "service_healthy", "service_completed_successfully"}

var (
	leaf  = &node{any: true}
	empty = &node{keys: map[string]*node{}} // a mapping with no keys (or null)

	portNode = &node{keys: map[string]*node{
		"target": leaf, "published": leaf, "protocol": {values: []string{"tcp", "udp"}}, "host_ip": leaf,
	}}
	volumeNode = &node{keys: map[string]*node{
		"type": {values: []string{VolumeNamed, VolumeBind}}, "source": leaf, "target": leaf, "read_only": leaf,
	}}
	envFileNode   = &node{keys: map[string]*node{"path": leaf, "required": leaf}}
	svcConfigNode = &node{keys: map[string]*node{"source": leaf, "target": leaf}}
	healthNode    = &node{keys: map[string]*node{
		"test": leaf, "interval": leaf, "timeout": leaf, "retries": leaf, "start_period": leaf, "disable": leaf,
	}}
	dependsNode = &node{
		names: &node{keys: map[string]*node{
			"condition": {values: composeConditions[:]},
		}},
	}
	svcNetworksNode = &node{names: &node{keys: map[string]*node{"aliases": leaf}}}

	serviceNode = &node{keys: map[string]*node{
		"image":       leaf,
		"command":     leaf,
		"entrypoint":  leaf,
		"environment": leaf,
		"env_file":    {items: envFileNode},
		"ports":       {items: portNode},
		"volumes":     {items: volumeNode},
		"networks":    svcNetworksNode,
		"depends_on":  dependsNode,
		"healthcheck": healthNode,
		"restart":     leaf, // checked after interpolation (on-failure:N)
		"shm_size":    leaf,
		"cpuset":      leaf,
		"configs":     {items: svcConfigNode},
	}}

	topNode = &node{keys: map[string]*node{
		"services": {names: serviceNode},
		"volumes":  {names: empty},
		"networks": {names: empty},
		"configs":  {names: &node{keys: map[string]*node{"file": leaf}}},
		"name":     leaf, // accepted and ignored: the runtime names projects
	}}
)

// checkAllowed walks one YAML document (as decoded into any) and returns
// the path and reason of the first key outside the allow-list, in a
// stable order (mapping keys sorted); "" when every key is allowed.
func checkAllowed(doc any) (path, reason string) {
	if doc == nil {
		return "", ""
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, ok := doc.(map[any]any); ok {
			return topNode.check("", doc)
		}
		return "(top level)", "the compose file must be a mapping"
	}
	return topNode.check("", doc)
}

func (n *node) check(path string, v any) (string, string) {
	if n == nil || n.any {
		return "", ""
	}
	switch v := v.(type) {
	case map[string]any:
		return n.checkMap(path, v)
	case map[any]any: // a mapping with non-string keys (8080: …)
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = e
		}
		return n.checkMap(path, m)
	case []any:
		for i, e := range v {
			if _, isMap := e.(map[string]any); !isMap {
				continue
			}
			p := path + "[" + strconv.Itoa(i) + "]"
			if n.items == nil {
				return p, "only the short (string) form is supported here"
			}
			if p, r := n.items.check(p, e); p != "" {
				return p, r
			}
		}
	case string:
		if len(n.values) > 0 && !strings.Contains(v, "$") && !contains(n.values, v) {
			return path, fmt.Sprintf("value %q is not supported: want one of %s", v, strings.Join(n.values, ", "))
		}
	}
	return "", ""
}

func (n *node) checkMap(path string, m map[string]any) (string, string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, "x-") {
			continue
		}
		p := k
		if path != "" {
			p = path + "." + k
		}
		child := n.names
		if n.keys != nil {
			var ok bool
			if child, ok = n.keys[k]; !ok {
				return p, "key not supported in a product template"
			}
		} else if child == nil {
			return p, "a mapping is not supported here"
		}
		if p, r := child.check(p, m[k]); p != "" {
			return p, r
		}
	}
	return "", ""
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
