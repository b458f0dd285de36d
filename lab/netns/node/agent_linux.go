package node

import (
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/state"
)

// readNode reads the lab's state for a process of one of its nodes, and that node.
func readNode(store state.Store, labName, nodeName string) (*state.Lab, lab.Node, error) {
	st, err := store.Read(labName)
	if err != nil {
		return nil, lab.Node{}, err
	}
	node, ok := st.Node(nodeName)
	if !ok {
		return nil, lab.Node{}, &lab.NotFoundError{Kind: "node", Name: nodeName}
	}
	return st, node, nil
}
