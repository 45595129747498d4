package localcluster

import _ "embed"

// kwok needs Stage definitions to play the kubelet: stages/node.yaml initialises and heartbeats the
// fake nodes; stages/pod.yaml makes pods Ready (or stuck in ErrImagePull for images under
// FailingImageRegistry), completes Job pods and finishes deletions.
var (
	//go:embed stages/node.yaml
	nodeStages []byte
	//go:embed stages/pod.yaml
	podStages []byte
)

// FailingImageRegistry is a reserved registry name that can never resolve: a pod with an image
// under it stays Pending and un-ready, its containers waiting with reason ErrImagePull.
const FailingImageRegistry = "nonexistent.invalid/"

// Stages returns the kwok Stage documents the cluster runs with, as one multi-document YAML.
func Stages() []byte {
	out := make([]byte, 0, len(nodeStages)+len(podStages)+5)
	out = append(out, nodeStages...)
	out = append(out, "\n---\n"...)
	return append(out, podStages...)
}
