package template

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	composetpl "github.com/compose-spec/compose-go/v2/template"

	"github.com/norsk-oss/norsk-manager/proto/noderesources"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
	"github.com/norsk-oss/norsk-manager/worker"
)

// Resolve turns job (a WorkerJob with product_template set) into the
// Stack to run, from c's copy of the template:
//
//  1. the template and version are looked up: absent, the error wraps
//     worker.ErrTemplateUnavailable and names what was asked and what c has;
//  2. the interpolation variables are the template's .env, overridden by
//     job.product_template_parameters — nothing else (the worker's own
//     environment never leaks in); ${VAR} in .env values sees the
//     parameters and the file's earlier lines;
//  3. every template.json requiredParameters entry must be set and
//     non-empty, and every ${VAR:?} / ${VAR?} of the compose file must be
//     satisfied, else ErrInvalidJob naming the variable;
//  4. compose-go loads the file with those variables (interpolation,
//     schema, env_file, paths relative to the version's directory), and
//     the project becomes a Stack (env_file and configs files must be
//     regular files inside the version's directory, see checkInside;
//     values outside what the runtime can run
//     — a port range, a tmpfs volume, a bad restart policy — are
//     ErrInvalidJob naming the service and key);
//  5. the launch config is fused (FuseLaunchConfig) and set as
//     NORSK_LAUNCH_CONFIG in every service.
//
// Errors wrap worker.ErrTemplateUnavailable or worker.ErrInvalidJob. The
// compose file's name: is ignored: the runtime names the projects. Resolve
// reads env_file files and checks configs files from disk; it does not
// change c and is safe for concurrent use. A nil c has no templates.
func (c *Catalogue) Resolve(ctx context.Context, job *workerpb.WorkerJob) (*Stack, error) {
	ref := job.GetProductTemplate()
	if ref == nil {
		return nil, fmt.Errorf("%w: product_template is not set", worker.ErrInvalidJob)
	}
	tv, err := c.lookup(ref.GetName(), ref.GetVersion())
	if err != nil {
		return nil, err
	}
	env, err := tv.environment(job.GetProductTemplateParameters())
	if err != nil {
		return nil, err
	}
	launch, err := FuseLaunchConfig(tv.meta.LaunchDefaults, job.TemplateLaunchDefaultsJson, job.LaunchConfigJson)
	if err != nil {
		return nil, err
	}
	project, err := loader.LoadWithContext(ctx, tv.details(env), func(o *loader.Options) {
		o.SetProjectName(projectPlaceholder, true)
		// env_file is read below, once checkProjectFiles has seen every
		// path the interpolated file names.
		o.SkipResolveEnvironment = true
		// compose-go warns about each unset variable on logrus's global
		// logger (stderr, its own format): not in the worker's log.
		o.Interpolate.Substitute = func(s string, m composetpl.Mapping) (string, error) {
			return composetpl.SubstituteWithOptions(s, m, composetpl.WithoutLogging)
		}
	})
	if err != nil {
		return nil, composeError(tv, err)
	}
	if err := checkProjectFiles(tv.dir, project); err != nil {
		return nil, fmt.Errorf("%w: template %s %s: %w", worker.ErrInvalidJob, tv.name, tv.version, err)
	}
	if project, err = project.WithServicesEnvironmentResolved(false); err != nil {
		return nil, composeError(tv, err)
	}
	stack, err := toStack(project)
	if err != nil {
		return nil, fmt.Errorf("%w: template %s %s: %w", worker.ErrInvalidJob, tv.name, tv.version, err)
	}
	stack.Template, stack.Version, stack.LaunchConfig = tv.name, tv.version, launch
	for i := range stack.Services {
		stack.Services[i].Environment = setEnv(stack.Services[i].Environment, LaunchConfigEnv, string(launch))
	}
	return stack, nil
}

// lookup finds a version, or an error wrapping ErrTemplateUnavailable
// naming what c has.
func (c *Catalogue) lookup(name, ver string) (*version, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: no template %q (version %q); this worker has no templates (no --template-dir)", worker.ErrTemplateUnavailable, name, ver)
	}
	if tv := c.versions[name][ver]; tv != nil {
		return tv, nil
	}
	have := "no templates"
	if offers := c.Offers(); len(offers) > 0 {
		have = noderesources.DescribeTemplates(offers) // as the manager's refusal says it
	}
	if _, ok := c.versions[name]; ok {
		return nil, fmt.Errorf("%w: no version %q of template %q; this worker has: %s", worker.ErrTemplateUnavailable, ver, name, have)
	}
	return nil, fmt.Errorf("%w: no template %q (version %q); this worker has: %s", worker.ErrTemplateUnavailable, name, ver, have)
}

// environment returns the interpolation variables of a job: the .env
// defaults, overridden by params; and checks requiredParameters.
func (tv *version) environment(params map[string]string) (map[string]string, error) {
	for _, k := range sortedNames(params) {
		if !variablePattern.MatchString(k) {
			return nil, fmt.Errorf("%w: product_template_parameters[%q]: not a variable name (letters, digits, '_', not starting with a digit)", worker.ErrInvalidJob, k)
		}
		if v := params[k]; strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("%w: product_template_parameters[%q]: contains a NUL byte, which no environment variable or argument can hold", worker.ErrInvalidJob, k)
		} else if len(v) > MaxParameterSize {
			return nil, fmt.Errorf("%w: product_template_parameters[%q]: is %d bytes; a value must fit in one environment variable or argument (at most %d bytes)", worker.ErrInvalidJob, k, len(v), MaxParameterSize)
		}
	}
	env, err := parseDotEnv(tv.dotEnv, mapLookup(params))
	if err != nil {
		return nil, fmt.Errorf("%w: template %s %s: %s: %w", worker.ErrInvalidJob, tv.name, tv.version, EnvFile, err)
	}
	for k, v := range params {
		env[k] = v
	}
	for _, k := range tv.meta.RequiredParameters {
		if env[k] == "" {
			return nil, fmt.Errorf("%w: template %s %s requires parameter %s (template.json requiredParameters): set it in product_template_parameters",
				worker.ErrInvalidJob, tv.name, tv.version, k)
		}
	}
	return env, nil
}

// MaxParameterSize is the longest product_template_parameters value, in
// bytes: a value ends up in environment variables and arguments, and Linux
// refuses any single one of 128 KiB or more at exec (MAX_ARG_STRLEN,
// counting NAME= and the terminating NUL), so no longer value can run. (A
// value just under it may still fail at exec inside a longer string.)
// Larger data belongs in a file.
const MaxParameterSize = 128<<10 - 1

// composeError wraps a compose-go load error as ErrInvalidJob, naming the
// missing variable of a ${VAR:?} / ${VAR?}.
func composeError(tv *version, err error) error {
	var missing *composetpl.MissingRequiredError
	if errors.As(err, &missing) {
		msg := fmt.Sprintf("template %s %s requires variable %s", tv.name, tv.version, missing.Variable)
		if missing.Reason != "" {
			msg += " (" + missing.Reason + ")"
		}
		return fmt.Errorf("%w: %s: set it in product_template_parameters", worker.ErrInvalidJob, msg)
	}
	return fmt.Errorf("%w: template %s %s: %w", worker.ErrInvalidJob, tv.name, tv.version, err)
}

// setEnv sets k=v in a sorted K=V list, replacing any value of k.
func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, e := range env {
		if name, _, _ := strings.Cut(e, "="); name != k {
			out = append(out, e)
		}
	}
	out = append(out, k+"="+v)
	sort.Strings(out)
	return out
}
