package workload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Manifest is what a scenario file holds: ConfigMaps, Deployments and Services.
type Manifest struct {
	ConfigMaps  []*v1.ConfigMap
	Deployments []*appsv1.Deployment
	Services    []*v1.Service
}

// ParseManifest reads a YAML or JSON file of one or more documents. Only v1 ConfigMaps, apps/v1 Deployments and
// v1 Services are accepted; anything else is an error naming the document, so a typo is not silently ignored.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		switch {
		case tm.APIVersion == "apps/v1" && tm.Kind == "Deployment":
			var d appsv1.Deployment
			if err := yaml.UnmarshalStrict(doc, &d); err != nil {
				return nil, fmt.Errorf("document %d (Deployment): %w", n, err)
			}
			if err := validateDeployment(&d); err != nil {
				return nil, fmt.Errorf("document %d: %w", n, err)
			}
			m.Deployments = append(m.Deployments, &d)
		case tm.APIVersion == "v1" && tm.Kind == "ConfigMap":
			var c v1.ConfigMap
			if err := yaml.UnmarshalStrict(doc, &c); err != nil {
				return nil, fmt.Errorf("document %d (ConfigMap): %w", n, err)
			}
			if c.Name == "" {
				return nil, fmt.Errorf("document %d: ConfigMap has no metadata.name", n)
			}
			if c.Namespace == "" {
				c.Namespace = metav1.NamespaceDefault
			}
			m.ConfigMaps = append(m.ConfigMaps, &c)
		case tm.APIVersion == "v1" && tm.Kind == "Service":
			var s v1.Service
			if err := yaml.UnmarshalStrict(doc, &s); err != nil {
				return nil, fmt.Errorf("document %d (Service): %w", n, err)
			}
			if s.Name == "" {
				return nil, fmt.Errorf("document %d: Service has no metadata.name", n)
			}
			if s.Namespace == "" {
				s.Namespace = metav1.NamespaceDefault
			}
			m.Services = append(m.Services, &s)
		default:
			return nil, fmt.Errorf("document %d: unsupported kind %q (apiVersion %q): a lab manifest holds v1 ConfigMaps, apps/v1 Deployments and v1 Services", n, tm.Kind, tm.APIVersion)
		}
	}
	if len(m.Deployments) == 0 && len(m.Services) == 0 {
		return nil, errors.New("manifest holds no Deployment or Service")
	}
	return &m, nil
}

func validateDeployment(d *appsv1.Deployment) error {
	if d.Name == "" {
		return errors.New("a Deployment has no metadata.name")
	}
	if d.Namespace == "" {
		d.Namespace = metav1.NamespaceDefault
	}
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels) == 0 && len(d.Spec.Selector.MatchExpressions) == 0 {
		return fmt.Errorf("deployment %s: spec.selector is required", d.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return fmt.Errorf("deployment %s: %w", d.Name, err)
	}
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		return fmt.Errorf("deployment %s: spec.selector does not match spec.template.metadata.labels", d.Name)
	}
	if len(d.Spec.Template.Spec.Containers) == 0 {
		return fmt.Errorf("deployment %s: no containers", d.Name)
	}
	return nil
}
