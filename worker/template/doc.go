// Package template owns a worker's catalogue of product templates (issue
// 14 §1; docs/design/product-templates.md): loading the directory given
// to --template-dir (NAME/VERSION/compose.yaml, with an optional .env and
// template.json), refusing every compose key outside the allow-list, and
// turning a template and a WorkerJob into a Stack — the services to run,
// after interpolation with the job's product_template_parameters over the
// template's .env, with the fused launch config — in plain Go types.
//
// Compose files are read with compose-spec/compose-go (the library Docker
// Compose uses) and YAML with go.yaml.in/yaml/v4 (the one compose-go uses);
// launch configs are fused with evanphx/json-patch (RFC 7396). The package
// runs nothing: the Docker runtime (worker/docker) runs a Stack. It imports
// worker (for the error sentinels), the worker proto and
// proto/noderesources (the catalogue's description in errors), never
// worker/docker or any runtime, so the runtimes may depend on it.
package template
