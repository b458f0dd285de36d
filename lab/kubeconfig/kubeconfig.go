package kubeconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/lab"
)

// Path is where kind writes a cluster's kubeconfig, and where a netns lab writes its context too:
// --kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config (kind's own rule).
func Path(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if env := os.Getenv("KUBECONFIG"); env != "" {
		for _, p := range filepath.SplitList(env) {
			if p != "" {
				return p
			}
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".kube", "config")
	}
	return filepath.Join(home, ".kube", "config")
}

// Merge adds the one context of config to the kubeconfig file at path under the name context (its
// cluster and user take the same name, as kind names all three kind-NAME) and makes it the current context, as
// kind does. Entries of other names are kept. A file that is there and is not a kubeconfig is refused
// (NotKubeconfigError), and the file is always left mode 0600: it holds the lab's admin key.
func Merge(path, context string, config *clientcmdapi.Config) error {
	cur, ok := config.Contexts[config.CurrentContext]
	if !ok {
		return errors.New("kubeconfig without a current context")
	}
	into, err := load(path)
	if err != nil {
		return err
	}
	into.Clusters[context] = config.Clusters[cur.Cluster]
	into.AuthInfos[context] = config.AuthInfos[cur.AuthInfo]
	into.Contexts[context] = &clientcmdapi.Context{Cluster: context, AuthInfo: context}
	into.CurrentContext = context
	return write(path, into)
}

// Check says whether Merge could write into path: it is missing, empty or a kubeconfig.
// `up` can ask before it builds anything.
func Check(path string) error {
	_, err := load(path)
	return err
}

// Remove removes what Merge added (and the current context if it was that one), as `kind
// delete cluster` does. A file without it is left as it is, and so is a file that is no kubeconfig at all
// (someone replaced it since: nothing of the lab's is in it).
func Remove(path, context string) error {
	into, err := load(path)
	var notKubeconfig *NotKubeconfigError
	if errors.As(err, &notKubeconfig) {
		return nil
	}
	if err != nil || into.Contexts[context] == nil {
		return err
	}
	delete(into.Clusters, context)
	delete(into.AuthInfos, context)
	delete(into.Contexts, context)
	if into.CurrentContext == context {
		into.CurrentContext = ""
	}
	return write(path, into)
}

// NotKubeconfigError is a file at a kubeconfig's path that is something else: it is never overwritten.
type NotKubeconfigError struct {
	Path, Why string
}

func (e *NotKubeconfigError) Error() string {
	return fmt.Sprintf("%s exists and is not a kubeconfig (%s): not writing the lab's credentials over it; give another --kubeconfig or move it", e.Path, e.Why)
}

// kubeconfigKeys are the top-level fields of a kubeconfig (clientcmd's v1 Config).
var kubeconfigKeys = map[string]bool{"apiVersion": true, "kind": true, "preferences": true, "clusters": true,
	"users": true, "contexts": true, "current-context": true, "extensions": true}

// load reads the kubeconfig at path: a new one when there is no file or it holds nothing (whitespace,
// comments, {}). clientcmd itself accepts any YAML mapping as an empty kubeconfig (unknown fields are dropped),
// so a file is taken for one only when it says kind: Config or has nothing but a kubeconfig's fields.
func load(path string) (*clientcmdapi.Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return clientcmdapi.NewConfig(), nil
	}
	if err != nil {
		return nil, err
	}
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, &NotKubeconfigError{Path: path, Why: "not a YAML mapping"}
	}
	if len(top) == 0 {
		return clientcmdapi.NewConfig(), nil
	}
	if kind, ok := top["kind"]; ok && kind != "Config" {
		return nil, &NotKubeconfigError{Path: path, Why: fmt.Sprintf("kind %v, not Config", kind)}
	}
	if _, ok := top["kind"]; !ok {
		for k := range top {
			if !kubeconfigKeys[k] {
				return nil, &NotKubeconfigError{Path: path, Why: fmt.Sprintf("a field %q no kubeconfig has", k)}
			}
		}
	}
	c, err := clientcmd.Load(data)
	if err != nil {
		return nil, &NotKubeconfigError{Path: path, Why: lab.FirstLine(err.Error())}
	}
	return c, nil
}

// write writes config to path whole and mode 0600, whatever mode the file had: through a private
// temporary file renamed over it (clientcmd.WriteToFile keeps an existing file's mode, 0644 say, with the lab's
// key in it). A path that is a symbolic link keeps the link; its target is replaced. An existing file keeps its
// owner (root writing a sudo user's ~/.kube/config must not make it root's).
func write(path string, config *clientcmdapi.Config) error {
	content, err := clientcmd.Write(*config)
	if err != nil {
		return err
	}
	target := path
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		target = resolved
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".k8sguide-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone once renamed; removes it on every other way out
	if fi, err := os.Stat(target); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
			tmp.Chown(int(st.Uid), int(st.Gid))
		}
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}
