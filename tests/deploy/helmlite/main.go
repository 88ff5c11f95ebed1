// helmlite: renders the scg chart's templates the way `helm template` does,
// for tests/deploy/check_manifests.py on machines without Helm: Go's
// text/template with Sprig's functions (Debian: golang-go and
// golang-github-masterminds-sprig-dev) plus Helm's include, toYaml and
// required, and the release scg in the namespace scg.
//
//	helmlite CHART_DIR [VALUES_FILE...]   prints every rendered object
//
// It is not Helm: no lookup, tpl, Capabilities or subcharts (the chart uses none).
package main

import (
	"bytes"
	"fmt"
	"io/ioutil"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yaml "gopkg.in/yaml.v2"
)

func conv(v interface{}) interface{} {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		m := map[string]interface{}{}
		for k, x := range t {
			m[fmt.Sprint(k)] = conv(x)
		}
		return m
	case []interface{}:
		for i := range t {
			t[i] = conv(t[i])
		}
	}
	return v
}

func merge(a, b map[string]interface{}) map[string]interface{} {
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := a[k].(map[string]interface{}); ok {
				a[k] = merge(am, bm)
				continue
			}
		}
		a[k] = v
	}
	return a
}

func load(path string) map[string]interface{} {
	b, err := ioutil.ReadFile(path)
	if err != nil {
		panic(err)
	}
	var v interface{}
	if err := yaml.Unmarshal(b, &v); err != nil {
		panic(err)
	}
	if v == nil {
		return map[string]interface{}{}
	}
	return conv(v).(map[string]interface{})
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: helmlite CHART_DIR [VALUES_FILE...]")
		os.Exit(2)
	}
	chart := os.Args[1]
	values := load(filepath.Join(chart, "values.yaml"))
	for _, f := range os.Args[2:] {
		values = merge(values, load(f))
	}
	meta := load(filepath.Join(chart, "Chart.yaml"))
	data := map[string]interface{}{
		"Values":   values,
		"Release":  map[string]interface{}{"Name": "scg", "Namespace": "scg", "Service": "Helm"},
		"Chart":    map[string]interface{}{"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"]},
		"Template": map[string]interface{}{"BasePath": "scg/templates"},
	}
	t := template.New("gotpl")
	funcs := sprig.TxtFuncMap()
	funcs["toYaml"] = func(v interface{}) string {
		b, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(b), "\n")
	}
	funcs["include"] = func(name string, d interface{}) (string, error) {
		var buf bytes.Buffer
		err := t.ExecuteTemplate(&buf, name, d)
		return buf.String(), err
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return nil, fmt.Errorf(msg)
		}
		return v, nil
	}
	t.Funcs(funcs).Option("missingkey=zero")
	files, _ := filepath.Glob(filepath.Join(chart, "templates", "*"))
	sort.Strings(files)
	var names []string
	for _, f := range files {
		b, _ := ioutil.ReadFile(f)
		name := "scg/templates/" + filepath.Base(f)
		template.Must(t.New(name).Parse(string(b)))
		names = append(names, name)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".tpl") || strings.HasSuffix(n, ".txt") {
			continue
		}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, n, data); err != nil {
			fmt.Fprintln(os.Stderr, "ERROR", n, err)
			os.Exit(1)
		}
		if strings.TrimSpace(buf.String()) == "" {
			continue
		}
		fmt.Printf("---\n# Source: %s\n%s\n", n, buf.String())
	}
}
