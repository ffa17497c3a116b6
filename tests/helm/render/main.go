// Command render renders a Helm chart the way `helm template` does, for tests on machines without
// helm or a cluster: Go's text/template with sprig's functions plus the functions Helm adds
// (include, tpl, toYaml, fromYaml, toJson, required, fail, lookup).
//
//	render -chart DIR [-f VALUES]... [-name RELEASE] [-namespace NS] [-notes]
//
// Values are Chart's values.yaml deep-merged with each -f file in order (maps merge, anything else
// replaces, null deletes a key), then passed through JSON as Helm does, so numbers are float64 in
// templates exactly as with helm. The output is one YAML stream, each document preceded by
// "# Source: CHART/templates/FILE" like `helm template`; -notes prints the rendered NOTES.txt
// instead. Files whose names start with "_" only define templates. An error (a required value
// missing, fail, a template error) exits 1 with Helm's message.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yaml2 "gopkg.in/yaml.v2"
	yaml3 "gopkg.in/yaml.v3"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

func main() {
	var files valueFiles
	chartDir := flag.String("chart", "", "chart directory")
	name := flag.String("name", "strata", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	notes := flag.Bool("notes", false, "print the rendered NOTES.txt instead of the manifests")
	flag.Var(&files, "f", "values file (repeatable; later files win)")
	flag.Parse()
	if *chartDir == "" {
		fmt.Fprintln(os.Stderr, "render: -chart DIR is required")
		os.Exit(2)
	}
	out, err := render(*chartDir, files, *name, *namespace, *notes)
	if err != nil {
		fmt.Fprintf(os.Stderr, "render: %v\n", err)
		os.Exit(1)
	}
	os.Stdout.WriteString(out)
}

// readYAML decodes a YAML file into generic values the way Helm does (YAML -> JSON -> Go), so
// numbers become float64 and maps map[string]interface{}.
func readYAML(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return fromYAMLText(string(data), path)
}

func fromYAMLText(text, what string) (map[string]interface{}, error) {
	var raw interface{}
	if err := yaml3.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	if raw == nil {
		return map[string]interface{}{}, nil
	}
	j, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	var out map[string]interface{}
	if err := json.Unmarshal(j, &out); err != nil {
		return nil, fmt.Errorf("%s: top level must be a mapping: %v", what, err)
	}
	return out, nil
}

// mergeValues merges src into dst as Helm merges -f files: nested maps merge, other values
// replace, and a null in src deletes the key.
func mergeValues(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, srcIsMap := v.(map[string]interface{})
		dm, dstIsMap := dst[k].(map[string]interface{})
		if srcIsMap && dstIsMap {
			mergeValues(dm, sm)
		} else {
			dst[k] = v
		}
	}
}

// toYAML is Helm's toYaml: JSON field order (sorted keys), two-space indent, no trailing newline.
func toYAML(v interface{}) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var ordered yaml2.MapSlice
	var generic interface{}
	target := interface{}(&generic)
	if len(j) > 0 && j[0] == '{' {
		target = &ordered
	}
	if err := yaml2.Unmarshal(j, target); err != nil {
		return ""
	}
	var y []byte
	if len(j) > 0 && j[0] == '{' {
		y, err = yaml2.Marshal(ordered)
	} else {
		y, err = yaml2.Marshal(generic)
	}
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(y), "\n")
}

func toJSON(v interface{}) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(j)
}

type capabilities struct {
	KubeVersion struct{ Version, Major, Minor, GitVersion string }
	APIVersions apiVersions
}

type apiVersions []string

// Has reports whether the (pretend) cluster serves an API group version; a bare cluster here.
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func render(chartDir string, files []string, name, namespace string, notesOnly bool) (string, error) {
	chartMeta, err := readYAML(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	chartName, _ := chartMeta["name"].(string)
	if chartName == "" {
		return "", errors.New("Chart.yaml: name is required")
	}
	values, err := readYAML(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		v, err := readYAML(f)
		if err != nil {
			return "", err
		}
		mergeValues(values, v)
	}
	caps := capabilities{APIVersions: apiVersions{"v1", "apps/v1", "rbac.authorization.k8s.io/v1"}}
	caps.KubeVersion.Version, caps.KubeVersion.Major, caps.KubeVersion.Minor = "v1.29.0", "1", "29"
	caps.KubeVersion.GitVersion = "v1.29.0"
	// Helm exposes Chart.yaml fields capitalised (.Chart.Name, .Chart.AppVersion).
	chart := map[string]interface{}{}
	for k, v := range chartMeta {
		chart[strings.ToUpper(k[:1])+k[1:]] = v
	}
	release := map[string]interface{}{
		"Name": name, "Namespace": namespace, "Service": "Helm",
		"IsInstall": true, "IsUpgrade": false, "Revision": 1,
	}

	root := template.New("chart")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // Helm removes these: charts must not depend on the renderer's environment
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYAML
	funcs["toJson"] = toJSON
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m, err := fromYAMLText(s, "fromYaml")
		if err != nil {
			return map[string]interface{}{"Error": err.Error()}
		}
		return m
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	funcs["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	funcs["lookup"] = func(...interface{}) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil // no cluster: Helm's `template` answers the same
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	root.Funcs(funcs).Option("missingkey=zero")

	tmplDir := filepath.Join(chartDir, "templates")
	entries, err := os.ReadDir(tmplDir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		text, err := os.ReadFile(filepath.Join(tmplDir, e.Name()))
		if err != nil {
			return "", err
		}
		full := chartName + "/templates/" + e.Name()
		if _, err := root.New(full).Parse(string(text)); err != nil {
			return "", err
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)

	var out strings.Builder
	for _, n := range names {
		isNotes := n == "NOTES.txt"
		if strings.HasPrefix(n, "_") || isNotes != notesOnly {
			continue
		}
		full := chartName + "/templates/" + n
		data := map[string]interface{}{
			"Values": values, "Release": release, "Chart": chart, "Capabilities": caps,
			"Template": map[string]interface{}{"Name": full, "BasePath": chartName + "/templates"},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, full, data); err != nil {
			return "", err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if notesOnly {
			out.WriteString(text)
			continue
		}
		for _, doc := range splitDocuments(text) {
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", full, doc)
		}
	}
	return out.String(), nil
}

// splitDocuments splits a rendered file at "---" lines and drops documents that are empty or only
// comments, as Helm does.
func splitDocuments(text string) []string {
	var docs []string
	for _, part := range strings.Split("\n"+text, "\n---") {
		body := strings.Trim(part, "\n")
		if hasContent(body) {
			docs = append(docs, strings.TrimRight(body, " \n"))
		}
	}
	return docs
}

func hasContent(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}
