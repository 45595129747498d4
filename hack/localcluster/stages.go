package localcluster

import (
	_ "embed"
	"fmt"
)

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

// DefaultKwokPodWorkers is Options.KwokPodWorkers' default.
const DefaultKwokPodWorkers = 32

// KwokConfig returns kwok's --config file: its KwokConfiguration (podWorkers pod stages played
// at once) followed by the Stages. kwok applies its defaults only when no KwokConfiguration is
// given, so this one spells out v0.8.0's defaults for the other options that have one and no
// flag (a zero nodePlayStageParallelism stops kwok at start); the pod CIDR, the node IP and the
// managed nodes come from kwokArgs' flags, which override the file.
func KwokConfig(podWorkers int) []byte {
	conf := fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: %d
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: true
  enableProfilingHandler: true
  enableContentionProfiling: false
---
`, podWorkers)
	return append([]byte(conf), Stages()...)
}
