package kubeproxy

// The event recorder handed to the proxiers. kube-proxy posts Events to the apiserver; the lab has none, so
// events go to the proxy's log. (client-go's FakeRecorder would block once its buffer filled.)

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

type recorder struct{ log klog.Logger }

// newRecorder returns a recorder that logs every event.
func newRecorder(log klog.Logger) events.EventRecorder { return recorder{log: log} }

func (r recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	r.log.Info("event", "type", eventtype, "reason", reason, "action", action, "note", fmt.Sprintf(note, args...))
}
