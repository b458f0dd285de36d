package scenarios

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/internal/readcap"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.yaml.in/yaml/v3"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaFile is the JSON Schema of a scenario file as written; Schema completes it.
//
//go:embed scenario.schema.json
var schemaFile []byte

// schemaDataplanes is the line of schemaFile that lists the dataplanes: Schema writes it from the engines.
var schemaDataplanes = regexp.MustCompile(`(?m)^(\s*"dataplane": \{"enum": )\[[^\]]*\](\},?)$`)

// Schema is the JSON Schema of a scenario file, for editors (`k8sguide scenario schema`) and for Load, with the
// dataplanes' enum written from the engines. The file's own enum is for editors that read it in place (the
// lessons' yaml-language-server lines); TestSchemaFileNamesEveryEngine keeps it equal to the engines'.
func Schema() []byte {
	names, _ := json.Marshal(Dataplanes())
	names = bytes.ReplaceAll(names, []byte(`","`), []byte(`", "`))
	return schemaDataplanes.ReplaceAll(schemaFile, append([]byte("${1}"), append(names, "${2}"...)...))
}

// Dataplanes are the dataplanes a scenario may name, in the order a run takes them: the engines'.
func Dataplanes() []string {
	var names []string
	for _, n := range engines.Names() {
		names = append(names, string(n))
	}
	return names
}

// LineError is one thing wrong with a scenario file, at its line.
type LineError struct {
	File string
	Line int
	Msg  string
}

func (e *LineError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Parse reads a scenario file's bytes: the JSON Schema first (unknown fields, wrong types, bad values, each with its
// line), then what a schema cannot say (exactly one action per step, references to nodes, Services and Deployments
// the scenario has, files beside it). files reads a file a step names (nil: steps may not name files). Every
// problem found is in the error, one per line.
func Parse(file string, data []byte, files func(name string) ([]byte, error)) (*Scenario, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &LineError{File: file, Msg: "empty file"}
		}
		return nil, &LineError{File: file, Line: yamlErrorLine(err), Msg: yamlErrorText(err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &LineError{File: file, Line: extra.Line, Msg: "one scenario per file: a second YAML document starts here"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if err := checkAliases(file, root); err != nil {
		return nil, err
	}
	if errs := validateSchema(file, root); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Scenario{File: file, files: files}
	if err := root.Decode(s); err != nil {
		// The schema and the types agree, so this is a value the schema lets through and the types refuse.
		return nil, &LineError{File: file, Line: yamlErrorLine(err), Msg: yamlErrorText(err)}
	}
	steps := mapValue(root, "steps")
	for i := range s.Steps {
		if steps != nil && i < len(steps.Content) {
			s.Steps[i].Line = steps.Content[i].Line
		}
	}
	if errs := s.validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// LoadFile reads a scenario file; files a step names are read from its directory.
func LoadFile(path string) (*Scenario, error) {
	data, err := readcap.Scenario.File(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	return Parse(path, data, func(name string) ([]byte, error) {
		if filepath.IsAbs(name) || strings.HasPrefix(filepath.Clean(name), "..") {
			return nil, fmt.Errorf("%s: a file beside the scenario, named relative to it", name)
		}
		return readcap.Manifest.File(filepath.Join(dir, name))
	})
}

var (
	// compiled is Schema compiled, for the engines' names it was written from (a test adds an engine).
	compiled     *jsonschema.Schema
	compiledFor  string
	compiledMu   sync.Mutex
	printer      = message.NewPrinter(language.English)
	yamlLineText = regexp.MustCompile(`^yaml: (?:unmarshal errors:\s*)?line (\d+): (.*)$`)
)

func schema() (*jsonschema.Schema, error) {
	compiledMu.Lock()
	defer compiledMu.Unlock()
	names := strings.Join(Dataplanes(), ",")
	if compiled != nil && compiledFor == names {
		return compiled, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	const url = "https://k8sguide.io/schemas/scenario-v1alpha1.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	if compiled, err = c.Compile(url); err != nil {
		return nil, err
	}
	compiledFor = names
	return compiled, nil
}

// validateSchema checks the document against Schema; each error carries the line of the value it is about.
func validateSchema(file string, root *yaml.Node) []error {
	sch, err := schema()
	if err != nil {
		return []error{fmt.Errorf("the scenario schema: %v", err)}
	}
	inst, err := toJSONValue(root)
	if err != nil {
		return []error{&LineError{File: file, Line: root.Line, Msg: err.Error()}}
	}
	err = sch.Validate(inst)
	var ve *jsonschema.ValidationError
	if err == nil || !errors.As(err, &ve) {
		if err != nil {
			return []error{err}
		}
		return nil
	}
	var out []error
	seen := map[string]bool{}
	for _, leaf := range leaves(ve) {
		line := lineOf(root, leaf)
		msg := leaf.ErrorKind.LocalizedString(printer)
		if loc := strings.Join(leaf.InstanceLocation, "."); loc != "" {
			msg = loc + ": " + msg
		}
		key := fmt.Sprint(line, msg)
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, &LineError{File: file, Line: line, Msg: msg})
	}
	slices.SortStableFunc(out, func(a, b error) int { return a.(*LineError).Line - b.(*LineError).Line })
	return out
}

// leaves are the specific complaints: the errors with no causes. Of an anyOf whose branches all failed, the
// branches that got inside the value speak (an object is told what is wrong inside it, not that it is no
// string); when none did, one line names what each branch wanted.
func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	if _, ok := e.ErrorKind.(*kind.AnyOf); ok {
		var inside []*jsonschema.ValidationError
		var wants []string
		for _, c := range e.Causes {
			for _, l := range leaves(c) {
				if len(l.InstanceLocation) > len(e.InstanceLocation) {
					inside = append(inside, l)
				} else {
					wants = append(wants, l.ErrorKind.LocalizedString(printer))
				}
			}
		}
		if len(inside) > 0 {
			return inside
		}
		return []*jsonschema.ValidationError{{InstanceLocation: e.InstanceLocation, ErrorKind: &either{wants}}}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// either is the complaint about a value that fits none of an anyOf's forms.
type either struct{ wants []string }

func (e *either) KeywordPath() []string { return []string{"anyOf"} }
func (e *either) LocalizedString(*message.Printer) string {
	return "none of its forms fits: " + strings.Join(e.wants, "; or ")
}

// nodeAt is the YAML node at a JSON Schema instance location (the closest existing node above it).
func nodeAt(n *yaml.Node, loc []string) *yaml.Node {
	for _, tok := range loc {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			if k := keyNode(n, tok); k != nil {
				next = mapValue(n, tok)
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(tok); err == nil && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

// lineOf is the line a schema complaint is about: the first unknown field's own line for "additional
// properties", else the value's.
func lineOf(root *yaml.Node, leaf *jsonschema.ValidationError) int {
	n := nodeAt(root, leaf.InstanceLocation)
	if ap, ok := leaf.ErrorKind.(*kind.AdditionalProperties); ok && len(ap.Properties) > 0 {
		if k := keyNode(n, ap.Properties[0]); k != nil {
			return k.Line
		}
	}
	return n.Line
}

func keyNode(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

// toJSONValue turns a YAML node into the value encoding/json would make of the same document.
// checkAliases refuses a document whose aliases expand it far past what its bytes hold (a "billion laughs": nine
// levels of ten aliases are 10⁹ nodes from under 1 KB), before anything expands them: the schema's check and the
// decoding into a Scenario each walk the document with every alias in place. yaml.v3 itself bounds aliasing
// only when it decodes into Go values, and its bound lets a document decode to 400,000 nodes of aliases; a
// scenario has no use for that. Aliases may repeat what the document holds a few times over (a check block
// reused per dataplane): expanded, it may have at most maxExpansion times its own nodes, plus 10,000.
func checkAliases(file string, root *yaml.Node) error {
	own := 0
	var count func(n *yaml.Node)
	count = func(n *yaml.Node) {
		own++
		if n.Kind != yaml.AliasNode {
			for _, c := range n.Content {
				count(c)
			}
		}
	}
	count(root)
	limit := maxExpansion*own + 10_000
	// Expanded sizes per node, memoized: each anchored node is counted once however often it is named, so
	// the count itself costs the document's size, not its expansion's.
	sizes := map[*yaml.Node]int{}
	var expanded func(n *yaml.Node) int
	expanded = func(n *yaml.Node) int {
		if v, ok := sizes[n]; ok {
			return v
		}
		sizes[n] = limit + 1 // a node met again while it is counted: an alias inside its own anchor
		total := 1
		if n.Kind == yaml.AliasNode {
			if n.Alias != nil {
				total += expanded(n.Alias)
			}
		} else {
			for _, c := range n.Content {
				total += expanded(c)
				if total > limit {
					break
				}
			}
		}
		total = min(total, limit+1)
		sizes[n] = total
		return total
	}
	if expanded(root) > limit {
		return &LineError{File: file, Line: firstAlias(root), Msg: fmt.Sprintf("its aliases would expand the scenario past %s nodes (%d times its own %s, plus 10,000): a scenario reuses a block a few times, no more", printer.Sprint(limit), maxExpansion, printer.Sprint(own))}
	}
	return nil
}

// maxExpansion bounds how many times over aliases may repeat a scenario's own nodes.
const maxExpansion = 4

// firstAlias is the line of the document's first alias, where its expansion starts.
func firstAlias(n *yaml.Node) int {
	if n.Kind == yaml.AliasNode {
		return n.Line
	}
	for _, c := range n.Content {
		if l := firstAlias(c); l > 0 {
			return l
		}
	}
	return 0
}

func toJSONValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return toJSONValue(n.Content[0])
	case yaml.AliasNode:
		return toJSONValue(n.Alias)
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a key must be a plain word", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: %s is given twice", k.Line, k.Value)
			}
			v, err := toJSONValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := toJSONValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, fmt.Errorf("line %d: %v", n.Line, err)
	}
	switch x := v.(type) {
	case int:
		return json.Number(strconv.Itoa(x)), nil
	case uint64:
		return json.Number(strconv.FormatUint(x, 10)), nil
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64)), nil
	}
	return v, nil
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func yamlErrorLine(err error) int {
	if m := yamlLineText.FindStringSubmatch(strings.TrimSpace(err.Error())); m != nil {
		n, _ := strconv.Atoi(m[1])
		// go-yaml counts lines from 1 for its scanner's errors but, for its parser's, prints the 0-based line
		// where the construct began (parser.fail adds 1 for scanner errors only); these are the parser's.
		if slices.Contains(yamlParserProblems, m[2]) {
			n++
		}
		return n
	}
	return 0
}

var yamlParserProblems = []string{
	"did not find expected <document start>", "did not find expected node content", "did not find expected key",
	"did not find expected '-' indicator", "did not find expected ',' or ']'", "did not find expected ',' or '}'",
}

func yamlErrorText(err error) string {
	s := strings.TrimSpace(err.Error())
	if m := yamlLineText.FindStringSubmatch(s); m != nil {
		return m[2]
	}
	return strings.TrimPrefix(s, "yaml: ")
}

// Builtin are the scenarios k8sguide ships (Lessons), by name.
func Builtin() ([]*Scenario, error) {
	entries, err := fs.ReadDir(Lessons, "lessons")
	if err != nil {
		return nil, err
	}
	var out []*Scenario
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		s, err := loadBuiltin(e.Name())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Scenario) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	return out, errors.Join(errs...)
}

func loadBuiltin(file string) (*Scenario, error) {
	data, err := fs.ReadFile(Lessons, path.Join("lessons", file))
	if err != nil {
		return nil, err
	}
	return Parse("builtin/"+file, data, func(name string) ([]byte, error) {
		return fs.ReadFile(Lessons, path.Join("lessons", path.Clean(name)))
	})
}

// Find is a shipped scenario by name, or a scenario file by path (a name with a '/' or ending in .yaml).
func Find(nameOrFile string) (*Scenario, error) {
	if strings.ContainsRune(nameOrFile, '/') || strings.HasSuffix(nameOrFile, ".yaml") || strings.HasSuffix(nameOrFile, ".yml") {
		return LoadFile(nameOrFile)
	}
	all, err := Builtin()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range all {
		if s.Metadata.Name == nameOrFile {
			return s, nil
		}
		names = append(names, s.Metadata.Name)
	}
	return nil, fmt.Errorf("no scenario %q: k8sguide ships %s (or give a file: ./my-lesson.yaml)", nameOrFile, strings.Join(names, ", "))
}

// Source is a scenario's file as written.
func Source(s *Scenario) ([]byte, error) {
	if name, ok := strings.CutPrefix(s.File, "builtin/"); ok {
		return fs.ReadFile(Lessons, path.Join("lessons", name))
	}
	return readcap.Scenario.File(s.File)
}
