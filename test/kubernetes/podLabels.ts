/**
 * The labels Kubernetes puts on the pods of a printed manifest: the pod template's own, and
 * those the controllers add when they create the pods (kubernetes-sigs/jobset: `jobset.sigs.k8s.io/*`
 * on every Job and pod of a JobSet; the Job controller: the completion index and the Job's
 * name). What a selector of the manifest (a NetworkPolicy's, a Service's) is matched against,
 * and where the simulation's Downward API reads its values.
 */

type Labels = Readonly<Record<string, string>>;

/** The labels of pod `completionIndex` of replicated job `replicatedJob` (one Job, index 0) of the JobSet `jobSet`. */
export const jobSetPodLabels = (p: { readonly jobSet: string; readonly replicatedJob: string; readonly templateLabels: Labels | undefined; readonly completionIndex: number; readonly restartAttempt: number }): Record<string, string> => {
  const jobName = `${p.jobSet}-${p.replicatedJob}-0`;
  return {
    ...p.templateLabels,
    "jobset.sigs.k8s.io/jobset-name": p.jobSet,
    "jobset.sigs.k8s.io/replicatedjob-name": p.replicatedJob,
    "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
    "jobset.sigs.k8s.io/job-index": "0",
    "jobset.sigs.k8s.io/job-key": jobName,
    "jobset.sigs.k8s.io/restart-attempt": String(p.restartAttempt),
    "batch.kubernetes.io/job-completion-index": String(p.completionIndex),
    "job-name": jobName,
  };
};

/** The labels of pod `completionIndex` of the indexed Job `job`. */
export const indexedJobPodLabels = (job: string, templateLabels: Labels | undefined, completionIndex: number): Record<string, string> => ({
  ...templateLabels,
  "batch.kubernetes.io/job-completion-index": String(completionIndex),
  "batch.kubernetes.io/job-name": job,
  "job-name": job,
});
