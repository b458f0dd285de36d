package run

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/internal/linediff"
	"github.com/k8sguide/k8sguide/lab"
)

// One lab, many lessons: bringing a lab up is most of what a lesson costs, and most lessons ask for the same lab.
// runShared runs such lessons one after another on one lab, as Kubernetes' e2e suite shares a cluster. Between
// two lessons the runner puts the lab back as `up` left it: it deletes every Namespace, Deployment, Service and
// ConfigMap the lesson made (what was not there before it), waits for their pods to go, and checks that the lab
// holds exactly what it held before. A lab it cannot put back is taken down, and the next lesson gets a new one.

// restoreTimeout bounds putting a shared lab back after a lesson: deleting its objects and their pods going.
const restoreTimeout = 2 * time.Minute

// runShared runs a group's cells one after another on the group's lab, and takes the lab down at the end.
func runShared(ctx context.Context, g labGroup, o Options, r *Report) {
	var lab sharedLab
	for _, j := range g.jobs {
		cell := lab.run(ctx, j, g.lab, o)
		if cell.Status == Error && !cell.failedCheck && ctx.Err() == nil && !cell.Kept && !cell.labTaken && !cell.notPutBack {
			first := cell.Error
			cell = lab.run(ctx, j, g.lab, o)
			cell.Retried = first
		}
		r.Cells[j.i] = cell
	}
	if lab.up != nil {
		if err := lab.up.down(); err != nil {
			last := &r.Cells[g.jobs[len(g.jobs)-1].i]
			last.Status, last.Error = Error, fmt.Sprintf("taking the shared lab down: %v", err)
		}
	}
}

// runOnLab runs the cells on the existing lab o.Lab, one after another, putting it back as it found it after
// each; a cell whose scenario asks for another lab is an error that says what differs. The lab stays up.
func runOnLab(ctx context.Context, jobs []job, o Options, r *Report) {
	l := sharedLab{existing: true}
	for _, j := range jobs {
		c := &cellRun{o: o, s: j.s, dp: j.dp}
		switch differs, lost := c.differsFrom(o.Lab), l.lost; {
		case differs != "" || lost != "" || ctx.Err() != nil:
			cell, _ := newCell(j.s, j.dp, o, o.Lab.Name)
			cell.Status = Error
			switch {
			case differs != "":
				cell.Error = fmt.Sprintf("not run on lab %s: the scenario asks for %s", o.Lab.Name, differs)
			case lost != "":
				cell.Error = fmt.Sprintf("not run on lab %s: %s", o.Lab.Name, lost)
			default:
				cell.Error = "interrupted"
			}
			r.Cells[j.i] = cell
		default:
			r.Cells[j.i] = l.run(ctx, j, o.Lab.Name, o)
		}
	}
}

// differsFrom says how the lab the cell's scenario asks for differs from st ("" when it does not): what up
// would have been given (upArgs) beside what the lab is.
func (c *cellRun) differsFrom(st *lab.Status) string {
	var d []string
	if string(st.Dataplane) != c.dp {
		d = append(d, fmt.Sprintf("dataplane %s (the lab's: %s)", c.dp, st.Dataplane))
	}
	if want, have := c.s.WorkersOf(), len(st.Nodes)-1; want != have {
		d = append(d, fmt.Sprintf("%d workers (the lab has %d)", want, have))
	}
	known := func(v string) string {
		if v == "" {
			return "not known"
		}
		return v
	}
	if want := cmp.Or(c.s.Lab.NodePortRange, lab.DefaultNodePortRange); want != st.NodePortRange {
		d = append(d, fmt.Sprintf("NodePort range %s (the lab's: %s)", want, known(st.NodePortRange)))
	}
	if want, have := strings.Join(c.s.Lab.NodePortAddresses, ","), strings.Join(st.NodePortAddresses, ","); want != have {
		d = append(d, fmt.Sprintf("NodePort addresses %s (the lab's: %s)", cmp.Or(want, "all"), cmp.Or(have, "all")))
	}
	if face, _ := engines.Lab(dataplanes.Name(c.dp)); len(face.LBAlgorithms) > 0 {
		if want := cmp.Or(c.s.Lab.LBAlgorithm, face.LBAlgorithms[0]); want != st.LBAlgorithm {
			d = append(d, fmt.Sprintf("LB algorithm %s (the lab's: %s)", want, known(st.LBAlgorithm)))
		}
	}
	return strings.Join(d, ", ")
}

// sharedLab is a group's lab while it is up.
type sharedLab struct {
	up *cellRun // the cell that ran on it last (nil: no lab is up)
	// before is what the lab held after up (an existing lab: before the first cell): objectsOf's lines.
	before []string
	// existing is a lab the run did not make (scenario run --lab): it is never brought up or taken down.
	existing bool
	// lost says why an existing lab can take no more cells: it could not be put back after one.
	lost string
}

// run runs one cell on the shared lab, bringing it up first when none is.
func (l *sharedLab) run(ctx context.Context, j job, labName string, o Options) (cell Cell) {
	cell, c := newCell(j.s, j.dp, o, labName)
	defer func() { cell.Seconds = time.Since(cell.Started).Seconds() }()
	switch {
	case l.existing && l.before == nil:
		before, err := c.objects(ctx)
		if err != nil {
			cell.Status, cell.Error = Error, "reading the lab: "+err.Error()
			return cell
		}
		l.before = before
		c.say("on lab %s, which the run did not make: what the scenario makes is deleted after it", c.lab)
	case l.existing:
		c.say("on lab %s, as it was before the run", c.lab)
	case l.up == nil:
		if ctx.Err() != nil {
			cell.Status, cell.Error = Error, "interrupted"
			return cell
		}
		if !c.up(ctx, &cell) {
			return cell
		}
		before, err := c.objects(ctx)
		if err != nil {
			cell.Status, cell.Error = Error, "reading the new lab: "+err.Error()
			c.down()
			return cell
		}
		l.up, l.before = c, before
	default:
		c.say("on lab %s, as up left it (shared with the lessons before)", c.lab)
	}
	c.steps(ctx, &cell)
	switch {
	case ctx.Err() != nil && !l.existing:
		c.down()
		l.up = nil
	case l.existing:
		// Interrupted or not, what the scenario made goes: the lab is the user's.
		if err := c.putBack(ctx, l.before); err != nil {
			cell.notPutBack = true
			if cell.Status != Error {
				cell.Status, cell.Error = Error, "putting the lab back after the scenario: "+err.Error()
			}
			l.lost = fmt.Sprintf("it could not be put back after %s (%v)", c.s.Metadata.Name, err)
			c.say("the lab could not be put back (%v): the scenarios after this one do not run on it", err)
		}
	default:
		l.up = c // the lesson that ran last says the lab's down
		if err := c.putBack(ctx, l.before); err != nil {
			cell.notPutBack = true
			if cell.Status != Error {
				cell.Status, cell.Error = Error, "putting the shared lab back after the lesson: "+err.Error()
			}
			c.say("the lab could not be put back (%v): it goes, and the next lesson gets a new one", err)
			c.down()
			l.up = nil
		}
	}
	return cell
}

// labObject is what objects reads of each object.
type labObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
}

// objectKinds are what a lesson can make (deploy applies ConfigMaps, Deployments and Services; kubectl could
// make a Namespace), and pods, which must go with their Deployments.
const objectKinds = "namespaces,deployments,services,configmaps,pods"

// objects lists the lab's objects of objectKinds, one line each ("Kind namespace/name"), pods counted in one
// line, sorted. Each namespace's kube-root-ca.crt is left out: its controller makes it again when deleted.
func (c *cellRun) objects(ctx context.Context) ([]string, error) {
	out, err := c.k8sguide(ctx, "kubectl", "--name", c.lab, "--", "get", objectKinds, "--all-namespaces", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("listing the lab's objects: %v", err)
	}
	var list struct {
		Items []labObject `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("listing the lab's objects: %v", err)
	}
	pods := 0
	var lines []string
	for _, o := range list.Items {
		switch {
		case o.Kind == "Pod":
			pods++
		case o.Kind == "ConfigMap" && o.Metadata.Name == "kube-root-ca.crt":
		default:
			lines = append(lines, o.Kind+" "+o.Metadata.Namespace+"/"+o.Metadata.Name)
		}
	}
	lines = append(lines, fmt.Sprintf("Pods: %d", pods))
	slices.Sort(lines)
	return lines, nil
}

// putBack deletes what the lesson made (the objects not in before) and waits until the lab holds exactly before.
func (c *cellRun) putBack(ctx context.Context, before []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	now, err := c.objects(ctx)
	if err != nil {
		return err
	}
	// Namespaced objects by namespace, then the namespaces (deleting one deletes what is in it, but its objects'
	// deletion is then the namespace controller's, slower than deleting them here).
	made := map[string][]string{}
	var namespaces []string
	deleted := 0
	for _, line := range now {
		kind, ref, ok := strings.Cut(line, " ")
		if !ok || kind == "Pods:" || slices.Contains(before, line) {
			continue
		}
		deleted++
		ns, name, _ := strings.Cut(ref, "/")
		if kind == "Namespace" {
			namespaces = append(namespaces, "namespace/"+name)
			continue
		}
		made[ns] = append(made[ns], strings.ToLower(kind)+"/"+name)
	}
	for _, ns := range slices.Sorted(maps.Keys(made)) {
		args := append([]string{"kubectl", "--name", c.lab, "--", "delete", "-n", ns, "--ignore-not-found", "--wait", "--timeout=2m"}, made[ns]...)
		if _, err := c.k8sguide(ctx, args...); err != nil {
			return fmt.Errorf("deleting the lesson's objects in %s: %v", ns, err)
		}
	}
	if len(namespaces) > 0 {
		args := append([]string{"kubectl", "--name", c.lab, "--", "delete", "--ignore-not-found", "--wait", "--timeout=2m"}, namespaces...)
		if _, err := c.k8sguide(ctx, args...); err != nil {
			return fmt.Errorf("deleting the lesson's namespaces: %v", err)
		}
	}
	// The pods of the deleted Deployments go after them.
	for {
		if now, err = c.objects(ctx); err == nil && slices.Equal(now, before) {
			c.say("put back: the lesson's %d objects deleted", deleted)
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return err
			}
			return fmt.Errorf("the lab still differs from what up left after %s:\n%s", restoreTimeout, linediff.Sets(before, now))
		case <-time.After(time.Second):
		}
	}
}
