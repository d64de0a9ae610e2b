//! Field numbers of the Kubernetes protobuf messages the sim decodes: the
//! kinds kubectl's generator commands send (`kubectl create namespace|
//! configmap|secret|serviceaccount|deployment|job|cronjob|service|role|
//! rolebinding|clusterrole|clusterrolebinding|priorityclass|
//! poddisruptionbudget|quota`) and every message they reach. Field numbers
//! and names as the API's `generated.proto` files declare them (the wire
//! format is the protocol); a message missing here is refused, not guessed.

use super::{Field as F, Label as L, Type as T};

/// The fields of a message, by its short name (`core.v1.Pod`).
pub(super) fn fields(message: &str) -> Option<&'static [F]> {
    Some(match message {
        // `kubectl certificate approve|deny` (through the approval
        // subresource). `spec.extra` (map of ExtraValue) is not decoded:
        // the subresource writes only the status.
        "certificates.v1.CertificateSigningRequest" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("certificates.v1.CertificateSigningRequestSpec"), L::One),
            F(3, "status", T::Msg("certificates.v1.CertificateSigningRequestStatus"), L::One),
        ],
        "certificates.v1.CertificateSigningRequestSpec" => &[
            F(1, "request", T::Bytes, L::One),
            F(7, "signerName", T::Str, L::One),
            F(8, "expirationSeconds", T::Int, L::One),
            F(5, "usages", T::Str, L::Many),
            F(2, "username", T::Str, L::One),
            F(3, "uid", T::Str, L::One),
            F(4, "groups", T::Str, L::Many),
        ],
        "certificates.v1.CertificateSigningRequestStatus" => &[
            F(1, "conditions", T::Msg("certificates.v1.CertificateSigningRequestCondition"), L::Many),
            F(2, "certificate", T::Bytes, L::One),
        ],
        "certificates.v1.CertificateSigningRequestCondition" => &[
            F(1, "type", T::Str, L::One),
            F(6, "status", T::Str, L::One),
            F(2, "reason", T::Str, L::One),
            F(3, "message", T::Str, L::One),
            F(4, "lastUpdateTime", T::Time, L::One),
            F(5, "lastTransitionTime", T::Time, L::One),
        ],
        "core.v1.Namespace" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("core.v1.NamespaceSpec"), L::One),
            F(3, "status", T::Msg("core.v1.NamespaceStatus"), L::One),
        ],
        "core.v1.ConfigMap" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(4, "immutable", T::Bool, L::One),
            F(2, "data", T::Str, L::Map),
            F(3, "binaryData", T::Bytes, L::Map),
        ],
        "core.v1.Secret" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(5, "immutable", T::Bool, L::One),
            F(2, "data", T::Bytes, L::Map),
            F(4, "stringData", T::Str, L::Map),
            F(3, "type", T::Str, L::One),
        ],
        "core.v1.ServiceAccount" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "secrets", T::Msg("core.v1.ObjectReference"), L::Many),
            F(3, "imagePullSecrets", T::Msg("core.v1.LocalObjectReference"), L::Many),
            F(4, "automountServiceAccountToken", T::Bool, L::One),
        ],
        "core.v1.Service" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("core.v1.ServiceSpec"), L::One),
            F(3, "status", T::Msg("core.v1.ServiceStatus"), L::One),
        ],
        "core.v1.ResourceQuota" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("core.v1.ResourceQuotaSpec"), L::One),
            F(3, "status", T::Msg("core.v1.ResourceQuotaStatus"), L::One),
        ],
        "apps.v1.Deployment" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("apps.v1.DeploymentSpec"), L::One),
            F(3, "status", T::Msg("apps.v1.DeploymentStatus"), L::One),
        ],
        "batch.v1.Job" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("batch.v1.JobSpec"), L::One),
            F(3, "status", T::Msg("batch.v1.JobStatus"), L::One),
        ],
        "batch.v1.CronJob" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("batch.v1.CronJobSpec"), L::One),
            F(3, "status", T::Msg("batch.v1.CronJobStatus"), L::One),
        ],
        "rbac.v1.Role" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "rules", T::Msg("rbac.v1.PolicyRule"), L::Many),
        ],
        "rbac.v1.RoleBinding" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "subjects", T::Msg("rbac.v1.Subject"), L::Many),
            F(3, "roleRef", T::Msg("rbac.v1.RoleRef"), L::One),
        ],
        "rbac.v1.ClusterRole" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "rules", T::Msg("rbac.v1.PolicyRule"), L::Many),
            F(3, "aggregationRule", T::Msg("rbac.v1.AggregationRule"), L::One),
        ],
        "rbac.v1.ClusterRoleBinding" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "subjects", T::Msg("rbac.v1.Subject"), L::Many),
            F(3, "roleRef", T::Msg("rbac.v1.RoleRef"), L::One),
        ],
        "scheduling.v1.PriorityClass" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "value", T::Int, L::One),
            F(3, "globalDefault", T::Bool, L::One),
            F(4, "description", T::Str, L::One),
            F(5, "preemptionPolicy", T::Str, L::One),
        ],
        "policy.v1.PodDisruptionBudget" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("policy.v1.PodDisruptionBudgetSpec"), L::One),
            F(3, "status", T::Msg("policy.v1.PodDisruptionBudgetStatus"), L::One),
        ],
        "runtime.Unknown" => &[
            F(1, "typeMeta", T::Msg("runtime.TypeMeta"), L::One),
            F(2, "raw", T::Bytes, L::One),
            F(3, "contentEncoding", T::Str, L::One),
            F(4, "contentType", T::Str, L::One),
        ],
        "meta.v1.ObjectMeta" => &[
            F(1, "name", T::Str, L::One),
            F(2, "generateName", T::Str, L::One),
            F(3, "namespace", T::Str, L::One),
            F(4, "selfLink", T::Str, L::One),
            F(5, "uid", T::Str, L::One),
            F(6, "resourceVersion", T::Str, L::One),
            F(7, "generation", T::Int, L::One),
            F(8, "creationTimestamp", T::Time, L::One),
            F(9, "deletionTimestamp", T::Time, L::One),
            F(10, "deletionGracePeriodSeconds", T::Int, L::One),
            F(11, "labels", T::Str, L::Map),
            F(12, "annotations", T::Str, L::Map),
            F(13, "ownerReferences", T::Msg("meta.v1.OwnerReference"), L::Many),
            F(14, "finalizers", T::Str, L::Many),
            F(17, "managedFields", T::Msg("meta.v1.ManagedFieldsEntry"), L::Many),
        ],
        "core.v1.NamespaceSpec" => &[F(1, "finalizers", T::Str, L::Many)],
        "core.v1.NamespaceStatus" => {
            &[F(1, "phase", T::Str, L::One), F(2, "conditions", T::Msg("core.v1.NamespaceCondition"), L::Many)]
        }
        "core.v1.ObjectReference" => &[
            F(1, "kind", T::Str, L::One),
            F(2, "namespace", T::Str, L::One),
            F(3, "name", T::Str, L::One),
            F(4, "uid", T::Str, L::One),
            F(5, "apiVersion", T::Str, L::One),
            F(6, "resourceVersion", T::Str, L::One),
            F(7, "fieldPath", T::Str, L::One),
        ],
        "core.v1.LocalObjectReference" => &[F(1, "name", T::Str, L::One)],
        "core.v1.ServiceSpec" => &[
            F(1, "ports", T::Msg("core.v1.ServicePort"), L::Many),
            F(2, "selector", T::Str, L::Map),
            F(3, "clusterIP", T::Str, L::One),
            F(18, "clusterIPs", T::Str, L::Many),
            F(4, "type", T::Str, L::One),
            F(5, "externalIPs", T::Str, L::Many),
            F(7, "sessionAffinity", T::Str, L::One),
            F(8, "loadBalancerIP", T::Str, L::One),
            F(9, "loadBalancerSourceRanges", T::Str, L::Many),
            F(10, "externalName", T::Str, L::One),
            F(11, "externalTrafficPolicy", T::Str, L::One),
            F(12, "healthCheckNodePort", T::Int, L::One),
            F(13, "publishNotReadyAddresses", T::Bool, L::One),
            F(14, "sessionAffinityConfig", T::Msg("core.v1.SessionAffinityConfig"), L::One),
            F(19, "ipFamilies", T::Str, L::Many),
            F(17, "ipFamilyPolicy", T::Str, L::One),
            F(20, "allocateLoadBalancerNodePorts", T::Bool, L::One),
            F(21, "loadBalancerClass", T::Str, L::One),
            F(22, "internalTrafficPolicy", T::Str, L::One),
            F(23, "trafficDistribution", T::Str, L::One),
        ],
        "core.v1.ServiceStatus" => &[
            F(1, "loadBalancer", T::Msg("core.v1.LoadBalancerStatus"), L::One),
            F(2, "conditions", T::Msg("meta.v1.Condition"), L::Many),
        ],
        "core.v1.ResourceQuotaSpec" => &[
            F(1, "hard", T::Quantity, L::Map),
            F(2, "scopes", T::Str, L::Many),
            F(3, "scopeSelector", T::Msg("core.v1.ScopeSelector"), L::One),
        ],
        "core.v1.ResourceQuotaStatus" => &[F(1, "hard", T::Quantity, L::Map), F(2, "used", T::Quantity, L::Map)],
        "apps.v1.DeploymentSpec" => &[
            F(1, "replicas", T::Int, L::One),
            F(2, "selector", T::Msg("meta.v1.LabelSelector"), L::One),
            F(3, "template", T::Msg("core.v1.PodTemplateSpec"), L::One),
            F(4, "strategy", T::Msg("apps.v1.DeploymentStrategy"), L::One),
            F(5, "minReadySeconds", T::Int, L::One),
            F(6, "revisionHistoryLimit", T::Int, L::One),
            F(7, "paused", T::Bool, L::One),
            F(9, "progressDeadlineSeconds", T::Int, L::One),
        ],
        "apps.v1.DeploymentStatus" => &[
            F(1, "observedGeneration", T::Int, L::One),
            F(2, "replicas", T::Int, L::One),
            F(3, "updatedReplicas", T::Int, L::One),
            F(7, "readyReplicas", T::Int, L::One),
            F(4, "availableReplicas", T::Int, L::One),
            F(5, "unavailableReplicas", T::Int, L::One),
            F(9, "terminatingReplicas", T::Int, L::One),
            F(6, "conditions", T::Msg("apps.v1.DeploymentCondition"), L::Many),
            F(8, "collisionCount", T::Int, L::One),
        ],
        "batch.v1.JobSpec" => &[
            F(1, "parallelism", T::Int, L::One),
            F(2, "completions", T::Int, L::One),
            F(3, "activeDeadlineSeconds", T::Int, L::One),
            F(11, "podFailurePolicy", T::Msg("batch.v1.PodFailurePolicy"), L::One),
            F(16, "successPolicy", T::Msg("batch.v1.SuccessPolicy"), L::One),
            F(7, "backoffLimit", T::Int, L::One),
            F(12, "backoffLimitPerIndex", T::Int, L::One),
            F(13, "maxFailedIndexes", T::Int, L::One),
            F(4, "selector", T::Msg("meta.v1.LabelSelector"), L::One),
            F(5, "manualSelector", T::Bool, L::One),
            F(6, "template", T::Msg("core.v1.PodTemplateSpec"), L::One),
            F(8, "ttlSecondsAfterFinished", T::Int, L::One),
            F(9, "completionMode", T::Str, L::One),
            F(10, "suspend", T::Bool, L::One),
            F(14, "podReplacementPolicy", T::Str, L::One),
            F(15, "managedBy", T::Str, L::One),
            F(17, "scheduling", T::Msg("batch.v1.JobSchedulingConfiguration"), L::One),
        ],
        "batch.v1.JobStatus" => &[
            F(1, "conditions", T::Msg("batch.v1.JobCondition"), L::Many),
            F(2, "startTime", T::Time, L::One),
            F(3, "completionTime", T::Time, L::One),
            F(4, "active", T::Int, L::One),
            F(5, "succeeded", T::Int, L::One),
            F(6, "failed", T::Int, L::One),
            F(11, "terminating", T::Int, L::One),
            F(7, "completedIndexes", T::Str, L::One),
            F(10, "failedIndexes", T::Str, L::One),
            F(8, "uncountedTerminatedPods", T::Msg("batch.v1.UncountedTerminatedPods"), L::One),
            F(9, "ready", T::Int, L::One),
        ],
        "batch.v1.CronJobSpec" => &[
            F(1, "schedule", T::Str, L::One),
            F(8, "timeZone", T::Str, L::One),
            F(2, "startingDeadlineSeconds", T::Int, L::One),
            F(3, "concurrencyPolicy", T::Str, L::One),
            F(4, "suspend", T::Bool, L::One),
            F(5, "jobTemplate", T::Msg("batch.v1.JobTemplateSpec"), L::One),
            F(6, "successfulJobsHistoryLimit", T::Int, L::One),
            F(7, "failedJobsHistoryLimit", T::Int, L::One),
        ],
        "batch.v1.CronJobStatus" => &[
            F(1, "active", T::Msg("core.v1.ObjectReference"), L::Many),
            F(4, "lastScheduleTime", T::Time, L::One),
            F(5, "lastSuccessfulTime", T::Time, L::One),
        ],
        "rbac.v1.PolicyRule" => &[
            F(1, "verbs", T::Str, L::Many),
            F(2, "apiGroups", T::Str, L::Many),
            F(3, "resources", T::Str, L::Many),
            F(4, "resourceNames", T::Str, L::Many),
            F(5, "nonResourceURLs", T::Str, L::Many),
        ],
        "rbac.v1.Subject" => &[
            F(1, "kind", T::Str, L::One),
            F(2, "apiGroup", T::Str, L::One),
            F(3, "name", T::Str, L::One),
            F(4, "namespace", T::Str, L::One),
        ],
        "rbac.v1.RoleRef" => {
            &[F(1, "apiGroup", T::Str, L::One), F(2, "kind", T::Str, L::One), F(3, "name", T::Str, L::One)]
        }
        "rbac.v1.AggregationRule" => &[F(1, "clusterRoleSelectors", T::Msg("meta.v1.LabelSelector"), L::Many)],
        "policy.v1.PodDisruptionBudgetSpec" => &[
            F(1, "minAvailable", T::IntOrString, L::One),
            F(2, "selector", T::Msg("meta.v1.LabelSelector"), L::One),
            F(3, "maxUnavailable", T::IntOrString, L::One),
            F(4, "unhealthyPodEvictionPolicy", T::Str, L::One),
        ],
        "policy.v1.PodDisruptionBudgetStatus" => &[
            F(1, "observedGeneration", T::Int, L::One),
            F(2, "disruptedPods", T::Time, L::Map),
            F(3, "disruptionsAllowed", T::Int, L::One),
            F(4, "currentHealthy", T::Int, L::One),
            F(5, "desiredHealthy", T::Int, L::One),
            F(6, "expectedPods", T::Int, L::One),
            F(7, "conditions", T::Msg("meta.v1.Condition"), L::Many),
        ],
        "runtime.TypeMeta" => &[F(1, "apiVersion", T::Str, L::One), F(2, "kind", T::Str, L::One)],
        "meta.v1.OwnerReference" => &[
            F(5, "apiVersion", T::Str, L::One),
            F(1, "kind", T::Str, L::One),
            F(3, "name", T::Str, L::One),
            F(4, "uid", T::Str, L::One),
            F(6, "controller", T::Bool, L::One),
            F(7, "blockOwnerDeletion", T::Bool, L::One),
        ],
        "meta.v1.ManagedFieldsEntry" => &[
            F(1, "manager", T::Str, L::One),
            F(2, "operation", T::Str, L::One),
            F(3, "apiVersion", T::Str, L::One),
            F(4, "time", T::Time, L::One),
            F(6, "fieldsType", T::Str, L::One),
            F(7, "fieldsV1", T::Msg("meta.v1.FieldsV1"), L::One),
            F(8, "subresource", T::Str, L::One),
        ],
        "core.v1.NamespaceCondition" => &[
            F(1, "type", T::Str, L::One),
            F(2, "status", T::Str, L::One),
            F(4, "lastTransitionTime", T::Time, L::One),
            F(5, "reason", T::Str, L::One),
            F(6, "message", T::Str, L::One),
        ],
        "core.v1.ServicePort" => &[
            F(1, "name", T::Str, L::One),
            F(2, "protocol", T::Str, L::One),
            F(6, "appProtocol", T::Str, L::One),
            F(3, "port", T::Int, L::One),
            F(4, "targetPort", T::IntOrString, L::One),
            F(5, "nodePort", T::Int, L::One),
        ],
        "core.v1.SessionAffinityConfig" => &[F(1, "clientIP", T::Msg("core.v1.ClientIPConfig"), L::One)],
        "core.v1.LoadBalancerStatus" => &[F(1, "ingress", T::Msg("core.v1.LoadBalancerIngress"), L::Many)],
        "meta.v1.Condition" => &[
            F(1, "type", T::Str, L::One),
            F(2, "status", T::Str, L::One),
            F(3, "observedGeneration", T::Int, L::One),
            F(4, "lastTransitionTime", T::Time, L::One),
            F(5, "reason", T::Str, L::One),
            F(6, "message", T::Str, L::One),
        ],
        "core.v1.ScopeSelector" => {
            &[F(1, "matchExpressions", T::Msg("core.v1.ScopedResourceSelectorRequirement"), L::Many)]
        }
        "meta.v1.LabelSelector" => &[
            F(1, "matchLabels", T::Str, L::Map),
            F(2, "matchExpressions", T::Msg("meta.v1.LabelSelectorRequirement"), L::Many),
        ],
        "core.v1.PodTemplateSpec" => {
            &[F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One), F(2, "spec", T::Msg("core.v1.PodSpec"), L::One)]
        }
        "apps.v1.DeploymentStrategy" => {
            &[F(1, "type", T::Str, L::One), F(2, "rollingUpdate", T::Msg("apps.v1.RollingUpdateDeployment"), L::One)]
        }
        "apps.v1.DeploymentCondition" => &[
            F(1, "type", T::Str, L::One),
            F(2, "status", T::Str, L::One),
            F(6, "lastUpdateTime", T::Time, L::One),
            F(7, "lastTransitionTime", T::Time, L::One),
            F(4, "reason", T::Str, L::One),
            F(5, "message", T::Str, L::One),
        ],
        "batch.v1.PodFailurePolicy" => &[F(1, "rules", T::Msg("batch.v1.PodFailurePolicyRule"), L::Many)],
        "batch.v1.SuccessPolicy" => &[F(1, "rules", T::Msg("batch.v1.SuccessPolicyRule"), L::Many)],
        "batch.v1.JobSchedulingConfiguration" => &[
            F(1, "schedulingPolicy", T::Msg("scheduling.v1alpha3.WorkloadPodGroupSchedulingPolicy"), L::One),
            F(2, "schedulingConstraints", T::Msg("scheduling.v1alpha3.WorkloadPodGroupSchedulingConstraints"), L::One),
            F(3, "disruptionMode", T::Msg("scheduling.v1alpha3.WorkloadPodGroupDisruptionMode"), L::One),
            F(4, "resourceClaims", T::Msg("scheduling.v1alpha3.WorkloadPodGroupResourceClaim"), L::Many),
        ],
        "batch.v1.JobCondition" => &[
            F(1, "type", T::Str, L::One),
            F(2, "status", T::Str, L::One),
            F(3, "lastProbeTime", T::Time, L::One),
            F(4, "lastTransitionTime", T::Time, L::One),
            F(5, "reason", T::Str, L::One),
            F(6, "message", T::Str, L::One),
        ],
        "batch.v1.UncountedTerminatedPods" => &[F(1, "succeeded", T::Str, L::Many), F(2, "failed", T::Str, L::Many)],
        "batch.v1.JobTemplateSpec" => {
            &[F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One), F(2, "spec", T::Msg("batch.v1.JobSpec"), L::One)]
        }
        "meta.v1.FieldsV1" => &[F(1, "Raw", T::Bytes, L::One)],
        "core.v1.ClientIPConfig" => &[F(1, "timeoutSeconds", T::Int, L::One)],
        "core.v1.LoadBalancerIngress" => &[
            F(1, "ip", T::Str, L::One),
            F(2, "hostname", T::Str, L::One),
            F(3, "ipMode", T::Str, L::One),
            F(4, "ports", T::Msg("core.v1.PortStatus"), L::Many),
        ],
        "core.v1.ScopedResourceSelectorRequirement" => {
            &[F(1, "scopeName", T::Str, L::One), F(2, "operator", T::Str, L::One), F(3, "values", T::Str, L::Many)]
        }
        "meta.v1.LabelSelectorRequirement" => {
            &[F(1, "key", T::Str, L::One), F(2, "operator", T::Str, L::One), F(3, "values", T::Str, L::Many)]
        }
        "core.v1.PodSpec" => &[
            F(1, "volumes", T::Msg("core.v1.Volume"), L::Many),
            F(20, "initContainers", T::Msg("core.v1.Container"), L::Many),
            F(2, "containers", T::Msg("core.v1.Container"), L::Many),
            F(34, "ephemeralContainers", T::Msg("core.v1.EphemeralContainer"), L::Many),
            F(3, "restartPolicy", T::Str, L::One),
            F(4, "terminationGracePeriodSeconds", T::Int, L::One),
            F(5, "activeDeadlineSeconds", T::Int, L::One),
            F(6, "dnsPolicy", T::Str, L::One),
            F(7, "nodeSelector", T::Str, L::Map),
            F(8, "serviceAccountName", T::Str, L::One),
            F(9, "serviceAccount", T::Str, L::One),
            F(21, "automountServiceAccountToken", T::Bool, L::One),
            F(10, "nodeName", T::Str, L::One),
            F(11, "hostNetwork", T::Bool, L::One),
            F(12, "hostPID", T::Bool, L::One),
            F(13, "hostIPC", T::Bool, L::One),
            F(27, "shareProcessNamespace", T::Bool, L::One),
            F(14, "securityContext", T::Msg("core.v1.PodSecurityContext"), L::One),
            F(15, "imagePullSecrets", T::Msg("core.v1.LocalObjectReference"), L::Many),
            F(16, "hostname", T::Str, L::One),
            F(17, "subdomain", T::Str, L::One),
            F(18, "affinity", T::Msg("core.v1.Affinity"), L::One),
            F(19, "schedulerName", T::Str, L::One),
            F(22, "tolerations", T::Msg("core.v1.Toleration"), L::Many),
            F(23, "hostAliases", T::Msg("core.v1.HostAlias"), L::Many),
            F(24, "priorityClassName", T::Str, L::One),
            F(25, "priority", T::Int, L::One),
            F(26, "dnsConfig", T::Msg("core.v1.PodDNSConfig"), L::One),
            F(28, "readinessGates", T::Msg("core.v1.PodReadinessGate"), L::Many),
            F(29, "runtimeClassName", T::Str, L::One),
            F(30, "enableServiceLinks", T::Bool, L::One),
            F(31, "preemptionPolicy", T::Str, L::One),
            F(32, "overhead", T::Quantity, L::Map),
            F(33, "topologySpreadConstraints", T::Msg("core.v1.TopologySpreadConstraint"), L::Many),
            F(35, "setHostnameAsFQDN", T::Bool, L::One),
            F(36, "os", T::Msg("core.v1.PodOS"), L::One),
            F(37, "hostUsers", T::Bool, L::One),
            F(38, "schedulingGates", T::Msg("core.v1.PodSchedulingGate"), L::Many),
            F(39, "resourceClaims", T::Msg("core.v1.PodResourceClaim"), L::Many),
            F(40, "resources", T::Msg("core.v1.ResourceRequirements"), L::One),
            F(41, "hostnameOverride", T::Str, L::One),
            F(43, "schedulingGroup", T::Msg("core.v1.PodSchedulingGroup"), L::One),
            F(44, "evictionResponders", T::Msg("core.v1.EvictionResponder"), L::Many),
        ],
        "apps.v1.RollingUpdateDeployment" => {
            &[F(1, "maxUnavailable", T::IntOrString, L::One), F(2, "maxSurge", T::IntOrString, L::One)]
        }
        "batch.v1.PodFailurePolicyRule" => &[
            F(1, "action", T::Str, L::One),
            F(2, "onExitCodes", T::Msg("batch.v1.PodFailurePolicyOnExitCodesRequirement"), L::One),
            F(3, "onPodConditions", T::Msg("batch.v1.PodFailurePolicyOnPodConditionsPattern"), L::Many),
        ],
        "batch.v1.SuccessPolicyRule" => {
            &[F(1, "succeededIndexes", T::Str, L::One), F(2, "succeededCount", T::Int, L::One)]
        }
        "scheduling.v1alpha3.WorkloadPodGroupSchedulingPolicy" => &[
            F(1, "basic", T::Msg("scheduling.v1alpha3.WorkloadPodGroupBasicSchedulingPolicy"), L::One),
            F(2, "gang", T::Msg("scheduling.v1alpha3.WorkloadPodGroupGangSchedulingPolicy"), L::One),
        ],
        "scheduling.v1alpha3.WorkloadPodGroupSchedulingConstraints" => {
            &[F(1, "topology", T::Msg("scheduling.v1alpha3.TopologyConstraint"), L::Many)]
        }
        "scheduling.v1alpha3.WorkloadPodGroupDisruptionMode" => &[
            F(1, "single", T::Msg("scheduling.v1alpha3.WorkloadPodGroupSingleDisruptionMode"), L::One),
            F(2, "all", T::Msg("scheduling.v1alpha3.WorkloadPodGroupAllDisruptionMode"), L::One),
        ],
        "scheduling.v1alpha3.WorkloadPodGroupResourceClaim" => &[
            F(1, "name", T::Str, L::One),
            F(2, "resourceClaimName", T::Str, L::One),
            F(3, "resourceClaimTemplateName", T::Str, L::One),
        ],
        "core.v1.PortStatus" => {
            &[F(1, "port", T::Int, L::One), F(2, "protocol", T::Str, L::One), F(3, "error", T::Str, L::One)]
        }
        "core.v1.Volume" => {
            &[F(1, "name", T::Str, L::One), F(2, "volumeSource", T::Msg("core.v1.VolumeSource"), L::One)]
        }
        "core.v1.Container" => &[
            F(1, "name", T::Str, L::One),
            F(2, "image", T::Str, L::One),
            F(3, "command", T::Str, L::Many),
            F(4, "args", T::Str, L::Many),
            F(5, "workingDir", T::Str, L::One),
            F(6, "ports", T::Msg("core.v1.ContainerPort"), L::Many),
            F(19, "envFrom", T::Msg("core.v1.EnvFromSource"), L::Many),
            F(7, "env", T::Msg("core.v1.EnvVar"), L::Many),
            F(8, "resources", T::Msg("core.v1.ResourceRequirements"), L::One),
            F(23, "resizePolicy", T::Msg("core.v1.ContainerResizePolicy"), L::Many),
            F(24, "restartPolicy", T::Str, L::One),
            F(25, "restartPolicyRules", T::Msg("core.v1.ContainerRestartRule"), L::Many),
            F(9, "volumeMounts", T::Msg("core.v1.VolumeMount"), L::Many),
            F(21, "volumeDevices", T::Msg("core.v1.VolumeDevice"), L::Many),
            F(10, "livenessProbe", T::Msg("core.v1.Probe"), L::One),
            F(11, "readinessProbe", T::Msg("core.v1.Probe"), L::One),
            F(22, "startupProbe", T::Msg("core.v1.Probe"), L::One),
            F(12, "lifecycle", T::Msg("core.v1.Lifecycle"), L::One),
            F(13, "terminationMessagePath", T::Str, L::One),
            F(20, "terminationMessagePolicy", T::Str, L::One),
            F(14, "imagePullPolicy", T::Str, L::One),
            F(15, "securityContext", T::Msg("core.v1.SecurityContext"), L::One),
            F(16, "stdin", T::Bool, L::One),
            F(17, "stdinOnce", T::Bool, L::One),
            F(18, "tty", T::Bool, L::One),
        ],
        "core.v1.EphemeralContainer" => &[
            F(1, "ephemeralContainerCommon", T::Msg("core.v1.EphemeralContainerCommon"), L::One),
            F(2, "targetContainerName", T::Str, L::One),
        ],
        "core.v1.PodSecurityContext" => &[
            F(1, "seLinuxOptions", T::Msg("core.v1.SELinuxOptions"), L::One),
            F(8, "windowsOptions", T::Msg("core.v1.WindowsSecurityContextOptions"), L::One),
            F(2, "runAsUser", T::Int, L::One),
            F(6, "runAsGroup", T::Int, L::One),
            F(3, "runAsNonRoot", T::Bool, L::One),
            F(4, "supplementalGroups", T::Int, L::Many),
            F(12, "supplementalGroupsPolicy", T::Str, L::One),
            F(5, "fsGroup", T::Int, L::One),
            F(7, "sysctls", T::Msg("core.v1.Sysctl"), L::Many),
            F(9, "fsGroupChangePolicy", T::Str, L::One),
            F(10, "seccompProfile", T::Msg("core.v1.SeccompProfile"), L::One),
            F(11, "appArmorProfile", T::Msg("core.v1.AppArmorProfile"), L::One),
            F(13, "seLinuxChangePolicy", T::Str, L::One),
        ],
        "core.v1.Affinity" => &[
            F(1, "nodeAffinity", T::Msg("core.v1.NodeAffinity"), L::One),
            F(2, "podAffinity", T::Msg("core.v1.PodAffinity"), L::One),
            F(3, "podAntiAffinity", T::Msg("core.v1.PodAntiAffinity"), L::One),
        ],
        "core.v1.Toleration" => &[
            F(1, "key", T::Str, L::One),
            F(2, "operator", T::Str, L::One),
            F(3, "value", T::Str, L::One),
            F(4, "effect", T::Str, L::One),
            F(5, "tolerationSeconds", T::Int, L::One),
        ],
        "core.v1.HostAlias" => &[F(1, "ip", T::Str, L::One), F(2, "hostnames", T::Str, L::Many)],
        "core.v1.PodDNSConfig" => &[
            F(1, "nameservers", T::Str, L::Many),
            F(2, "searches", T::Str, L::Many),
            F(3, "options", T::Msg("core.v1.PodDNSConfigOption"), L::Many),
        ],
        "core.v1.PodReadinessGate" => &[F(1, "conditionType", T::Str, L::One)],
        "core.v1.TopologySpreadConstraint" => &[
            F(1, "maxSkew", T::Int, L::One),
            F(2, "topologyKey", T::Str, L::One),
            F(3, "whenUnsatisfiable", T::Str, L::One),
            F(4, "labelSelector", T::Msg("meta.v1.LabelSelector"), L::One),
            F(5, "minDomains", T::Int, L::One),
            F(6, "nodeAffinityPolicy", T::Str, L::One),
            F(7, "nodeTaintsPolicy", T::Str, L::One),
            F(8, "matchLabelKeys", T::Str, L::Many),
        ],
        "core.v1.PodOS" => &[F(1, "name", T::Str, L::One)],
        "core.v1.PodSchedulingGate" => &[F(1, "name", T::Str, L::One)],
        "core.v1.PodResourceClaim" => &[
            F(1, "name", T::Str, L::One),
            F(3, "resourceClaimName", T::Str, L::One),
            F(4, "resourceClaimTemplateName", T::Str, L::One),
        ],
        "core.v1.ResourceRequirements" => &[
            F(1, "limits", T::Quantity, L::Map),
            F(2, "requests", T::Quantity, L::Map),
            F(3, "claims", T::Msg("core.v1.ResourceClaim"), L::Many),
        ],
        "core.v1.PodSchedulingGroup" => &[F(1, "podGroupName", T::Str, L::One)],
        "core.v1.EvictionResponder" => &[F(1, "name", T::Str, L::One), F(2, "priority", T::Int, L::One)],
        "batch.v1.PodFailurePolicyOnExitCodesRequirement" => {
            &[F(1, "containerName", T::Str, L::One), F(2, "operator", T::Str, L::One), F(3, "values", T::Int, L::Many)]
        }
        "batch.v1.PodFailurePolicyOnPodConditionsPattern" => {
            &[F(1, "type", T::Str, L::One), F(2, "status", T::Str, L::One)]
        }
        "scheduling.v1alpha3.WorkloadPodGroupBasicSchedulingPolicy" => &[],
        "scheduling.v1alpha3.WorkloadPodGroupGangSchedulingPolicy" => &[F(1, "minCount", T::Int, L::One)],
        "scheduling.v1alpha3.TopologyConstraint" => &[F(1, "key", T::Str, L::One)],
        "scheduling.v1alpha3.WorkloadPodGroupSingleDisruptionMode" => &[],
        "scheduling.v1alpha3.WorkloadPodGroupAllDisruptionMode" => &[],
        "core.v1.VolumeSource" => &[
            F(1, "hostPath", T::Msg("core.v1.HostPathVolumeSource"), L::One),
            F(2, "emptyDir", T::Msg("core.v1.EmptyDirVolumeSource"), L::One),
            F(3, "gcePersistentDisk", T::Msg("core.v1.GCEPersistentDiskVolumeSource"), L::One),
            F(4, "awsElasticBlockStore", T::Msg("core.v1.AWSElasticBlockStoreVolumeSource"), L::One),
            F(5, "gitRepo", T::Msg("core.v1.GitRepoVolumeSource"), L::One),
            F(6, "secret", T::Msg("core.v1.SecretVolumeSource"), L::One),
            F(7, "nfs", T::Msg("core.v1.NFSVolumeSource"), L::One),
            F(8, "iscsi", T::Msg("core.v1.ISCSIVolumeSource"), L::One),
            F(9, "glusterfs", T::Msg("core.v1.GlusterfsVolumeSource"), L::One),
            F(10, "persistentVolumeClaim", T::Msg("core.v1.PersistentVolumeClaimVolumeSource"), L::One),
            F(11, "rbd", T::Msg("core.v1.RBDVolumeSource"), L::One),
            F(12, "flexVolume", T::Msg("core.v1.FlexVolumeSource"), L::One),
            F(13, "cinder", T::Msg("core.v1.CinderVolumeSource"), L::One),
            F(14, "cephfs", T::Msg("core.v1.CephFSVolumeSource"), L::One),
            F(15, "flocker", T::Msg("core.v1.FlockerVolumeSource"), L::One),
            F(16, "downwardAPI", T::Msg("core.v1.DownwardAPIVolumeSource"), L::One),
            F(17, "fc", T::Msg("core.v1.FCVolumeSource"), L::One),
            F(18, "azureFile", T::Msg("core.v1.AzureFileVolumeSource"), L::One),
            F(19, "configMap", T::Msg("core.v1.ConfigMapVolumeSource"), L::One),
            F(20, "vsphereVolume", T::Msg("core.v1.VsphereVirtualDiskVolumeSource"), L::One),
            F(21, "quobyte", T::Msg("core.v1.QuobyteVolumeSource"), L::One),
            F(22, "azureDisk", T::Msg("core.v1.AzureDiskVolumeSource"), L::One),
            F(23, "photonPersistentDisk", T::Msg("core.v1.PhotonPersistentDiskVolumeSource"), L::One),
            F(26, "projected", T::Msg("core.v1.ProjectedVolumeSource"), L::One),
            F(24, "portworxVolume", T::Msg("core.v1.PortworxVolumeSource"), L::One),
            F(25, "scaleIO", T::Msg("core.v1.ScaleIOVolumeSource"), L::One),
            F(27, "storageos", T::Msg("core.v1.StorageOSVolumeSource"), L::One),
            F(28, "csi", T::Msg("core.v1.CSIVolumeSource"), L::One),
            F(29, "ephemeral", T::Msg("core.v1.EphemeralVolumeSource"), L::One),
            F(30, "image", T::Msg("core.v1.ImageVolumeSource"), L::One),
        ],
        "core.v1.ContainerPort" => &[
            F(1, "name", T::Str, L::One),
            F(2, "hostPort", T::Int, L::One),
            F(3, "containerPort", T::Int, L::One),
            F(4, "protocol", T::Str, L::One),
            F(5, "hostIP", T::Str, L::One),
        ],
        "core.v1.EnvFromSource" => &[
            F(1, "prefix", T::Str, L::One),
            F(2, "configMapRef", T::Msg("core.v1.ConfigMapEnvSource"), L::One),
            F(3, "secretRef", T::Msg("core.v1.SecretEnvSource"), L::One),
        ],
        "core.v1.EnvVar" => &[
            F(1, "name", T::Str, L::One),
            F(2, "value", T::Str, L::One),
            F(3, "valueFrom", T::Msg("core.v1.EnvVarSource"), L::One),
        ],
        "core.v1.ContainerResizePolicy" => {
            &[F(1, "resourceName", T::Str, L::One), F(2, "restartPolicy", T::Str, L::One)]
        }
        "core.v1.ContainerRestartRule" => &[
            F(1, "action", T::Str, L::One),
            F(2, "exitCodes", T::Msg("core.v1.ContainerRestartRuleOnExitCodes"), L::One),
        ],
        "core.v1.VolumeMount" => &[
            F(1, "name", T::Str, L::One),
            F(2, "readOnly", T::Bool, L::One),
            F(7, "recursiveReadOnly", T::Str, L::One),
            F(3, "mountPath", T::Str, L::One),
            F(4, "subPath", T::Str, L::One),
            F(5, "mountPropagation", T::Str, L::One),
            F(6, "subPathExpr", T::Str, L::One),
            F(8, "bindMountOptions", T::Str, L::Many),
        ],
        "core.v1.VolumeDevice" => &[F(1, "name", T::Str, L::One), F(2, "devicePath", T::Str, L::One)],
        "core.v1.Probe" => &[
            F(1, "handler", T::Msg("core.v1.ProbeHandler"), L::One),
            F(2, "initialDelaySeconds", T::Int, L::One),
            F(3, "timeoutSeconds", T::Int, L::One),
            F(4, "periodSeconds", T::Int, L::One),
            F(5, "successThreshold", T::Int, L::One),
            F(6, "failureThreshold", T::Int, L::One),
            F(7, "terminationGracePeriodSeconds", T::Int, L::One),
        ],
        "core.v1.Lifecycle" => &[
            F(1, "postStart", T::Msg("core.v1.LifecycleHandler"), L::One),
            F(2, "preStop", T::Msg("core.v1.LifecycleHandler"), L::One),
            F(3, "stopSignal", T::Str, L::One),
        ],
        "core.v1.SecurityContext" => &[
            F(1, "capabilities", T::Msg("core.v1.Capabilities"), L::One),
            F(2, "privileged", T::Bool, L::One),
            F(3, "seLinuxOptions", T::Msg("core.v1.SELinuxOptions"), L::One),
            F(10, "windowsOptions", T::Msg("core.v1.WindowsSecurityContextOptions"), L::One),
            F(4, "runAsUser", T::Int, L::One),
            F(8, "runAsGroup", T::Int, L::One),
            F(5, "runAsNonRoot", T::Bool, L::One),
            F(6, "readOnlyRootFilesystem", T::Bool, L::One),
            F(7, "allowPrivilegeEscalation", T::Bool, L::One),
            F(9, "procMount", T::Str, L::One),
            F(11, "seccompProfile", T::Msg("core.v1.SeccompProfile"), L::One),
            F(12, "appArmorProfile", T::Msg("core.v1.AppArmorProfile"), L::One),
        ],
        "core.v1.EphemeralContainerCommon" => &[
            F(1, "name", T::Str, L::One),
            F(2, "image", T::Str, L::One),
            F(3, "command", T::Str, L::Many),
            F(4, "args", T::Str, L::Many),
            F(5, "workingDir", T::Str, L::One),
            F(6, "ports", T::Msg("core.v1.ContainerPort"), L::Many),
            F(19, "envFrom", T::Msg("core.v1.EnvFromSource"), L::Many),
            F(7, "env", T::Msg("core.v1.EnvVar"), L::Many),
            F(8, "resources", T::Msg("core.v1.ResourceRequirements"), L::One),
            F(23, "resizePolicy", T::Msg("core.v1.ContainerResizePolicy"), L::Many),
            F(24, "restartPolicy", T::Str, L::One),
            F(25, "restartPolicyRules", T::Msg("core.v1.ContainerRestartRule"), L::Many),
            F(9, "volumeMounts", T::Msg("core.v1.VolumeMount"), L::Many),
            F(21, "volumeDevices", T::Msg("core.v1.VolumeDevice"), L::Many),
            F(10, "livenessProbe", T::Msg("core.v1.Probe"), L::One),
            F(11, "readinessProbe", T::Msg("core.v1.Probe"), L::One),
            F(22, "startupProbe", T::Msg("core.v1.Probe"), L::One),
            F(12, "lifecycle", T::Msg("core.v1.Lifecycle"), L::One),
            F(13, "terminationMessagePath", T::Str, L::One),
            F(20, "terminationMessagePolicy", T::Str, L::One),
            F(14, "imagePullPolicy", T::Str, L::One),
            F(15, "securityContext", T::Msg("core.v1.SecurityContext"), L::One),
            F(16, "stdin", T::Bool, L::One),
            F(17, "stdinOnce", T::Bool, L::One),
            F(18, "tty", T::Bool, L::One),
        ],
        "core.v1.SELinuxOptions" => &[
            F(1, "user", T::Str, L::One),
            F(2, "role", T::Str, L::One),
            F(3, "type", T::Str, L::One),
            F(4, "level", T::Str, L::One),
        ],
        "core.v1.WindowsSecurityContextOptions" => &[
            F(1, "gmsaCredentialSpecName", T::Str, L::One),
            F(2, "gmsaCredentialSpec", T::Str, L::One),
            F(3, "runAsUserName", T::Str, L::One),
            F(4, "hostProcess", T::Bool, L::One),
        ],
        "core.v1.Sysctl" => &[F(1, "name", T::Str, L::One), F(2, "value", T::Str, L::One)],
        "core.v1.SeccompProfile" => &[F(1, "type", T::Str, L::One), F(2, "localhostProfile", T::Str, L::One)],
        "core.v1.AppArmorProfile" => &[F(1, "type", T::Str, L::One), F(2, "localhostProfile", T::Str, L::One)],
        "core.v1.NodeAffinity" => &[
            F(1, "requiredDuringSchedulingIgnoredDuringExecution", T::Msg("core.v1.NodeSelector"), L::One),
            F(2, "preferredDuringSchedulingIgnoredDuringExecution", T::Msg("core.v1.PreferredSchedulingTerm"), L::Many),
        ],
        "core.v1.PodAffinity" => &[
            F(1, "requiredDuringSchedulingIgnoredDuringExecution", T::Msg("core.v1.PodAffinityTerm"), L::Many),
            F(2, "preferredDuringSchedulingIgnoredDuringExecution", T::Msg("core.v1.WeightedPodAffinityTerm"), L::Many),
        ],
        "core.v1.PodAntiAffinity" => &[
            F(1, "requiredDuringSchedulingIgnoredDuringExecution", T::Msg("core.v1.PodAffinityTerm"), L::Many),
            F(2, "preferredDuringSchedulingIgnoredDuringExecution", T::Msg("core.v1.WeightedPodAffinityTerm"), L::Many),
        ],
        "core.v1.PodDNSConfigOption" => &[F(1, "name", T::Str, L::One), F(2, "value", T::Str, L::One)],
        "core.v1.ResourceClaim" => &[F(1, "name", T::Str, L::One), F(2, "request", T::Str, L::One)],
        "core.v1.HostPathVolumeSource" => &[F(1, "path", T::Str, L::One), F(2, "type", T::Str, L::One)],
        "core.v1.EmptyDirVolumeSource" => {
            &[F(1, "medium", T::Str, L::One), F(2, "sizeLimit", T::Quantity, L::One), F(3, "mode", T::Int, L::One)]
        }
        "core.v1.GCEPersistentDiskVolumeSource" => &[
            F(1, "pdName", T::Str, L::One),
            F(2, "fsType", T::Str, L::One),
            F(3, "partition", T::Int, L::One),
            F(4, "readOnly", T::Bool, L::One),
        ],
        "core.v1.AWSElasticBlockStoreVolumeSource" => &[
            F(1, "volumeID", T::Str, L::One),
            F(2, "fsType", T::Str, L::One),
            F(3, "partition", T::Int, L::One),
            F(4, "readOnly", T::Bool, L::One),
        ],
        "core.v1.GitRepoVolumeSource" => {
            &[F(1, "repository", T::Str, L::One), F(2, "revision", T::Str, L::One), F(3, "directory", T::Str, L::One)]
        }
        "core.v1.SecretVolumeSource" => &[
            F(1, "secretName", T::Str, L::One),
            F(2, "items", T::Msg("core.v1.KeyToPath"), L::Many),
            F(3, "defaultMode", T::Int, L::One),
            F(4, "optional", T::Bool, L::One),
            F(5, "defaultUser", T::Int, L::One),
        ],
        "core.v1.NFSVolumeSource" => {
            &[F(1, "server", T::Str, L::One), F(2, "path", T::Str, L::One), F(3, "readOnly", T::Bool, L::One)]
        }
        "core.v1.ISCSIVolumeSource" => &[
            F(1, "targetPortal", T::Str, L::One),
            F(2, "iqn", T::Str, L::One),
            F(3, "lun", T::Int, L::One),
            F(4, "iscsiInterface", T::Str, L::One),
            F(5, "fsType", T::Str, L::One),
            F(6, "readOnly", T::Bool, L::One),
            F(7, "portals", T::Str, L::Many),
            F(8, "chapAuthDiscovery", T::Bool, L::One),
            F(11, "chapAuthSession", T::Bool, L::One),
            F(10, "secretRef", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(12, "initiatorName", T::Str, L::One),
        ],
        "core.v1.GlusterfsVolumeSource" => {
            &[F(1, "endpoints", T::Str, L::One), F(2, "path", T::Str, L::One), F(3, "readOnly", T::Bool, L::One)]
        }
        "core.v1.PersistentVolumeClaimVolumeSource" => {
            &[F(1, "claimName", T::Str, L::One), F(2, "readOnly", T::Bool, L::One)]
        }
        "core.v1.RBDVolumeSource" => &[
            F(1, "monitors", T::Str, L::Many),
            F(2, "image", T::Str, L::One),
            F(3, "fsType", T::Str, L::One),
            F(4, "pool", T::Str, L::One),
            F(5, "user", T::Str, L::One),
            F(6, "keyring", T::Str, L::One),
            F(7, "secretRef", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(8, "readOnly", T::Bool, L::One),
        ],
        "core.v1.FlexVolumeSource" => &[
            F(1, "driver", T::Str, L::One),
            F(2, "fsType", T::Str, L::One),
            F(3, "secretRef", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(4, "readOnly", T::Bool, L::One),
            F(5, "options", T::Str, L::Map),
        ],
        "core.v1.CinderVolumeSource" => &[
            F(1, "volumeID", T::Str, L::One),
            F(2, "fsType", T::Str, L::One),
            F(3, "readOnly", T::Bool, L::One),
            F(4, "secretRef", T::Msg("core.v1.LocalObjectReference"), L::One),
        ],
        "core.v1.CephFSVolumeSource" => &[
            F(1, "monitors", T::Str, L::Many),
            F(2, "path", T::Str, L::One),
            F(3, "user", T::Str, L::One),
            F(4, "secretFile", T::Str, L::One),
            F(5, "secretRef", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(6, "readOnly", T::Bool, L::One),
        ],
        "core.v1.FlockerVolumeSource" => &[F(1, "datasetName", T::Str, L::One), F(2, "datasetUUID", T::Str, L::One)],
        "core.v1.DownwardAPIVolumeSource" => &[
            F(1, "items", T::Msg("core.v1.DownwardAPIVolumeFile"), L::Many),
            F(2, "defaultMode", T::Int, L::One),
            F(3, "defaultUser", T::Int, L::One),
        ],
        "core.v1.FCVolumeSource" => &[
            F(1, "targetWWNs", T::Str, L::Many),
            F(2, "lun", T::Int, L::One),
            F(3, "fsType", T::Str, L::One),
            F(4, "readOnly", T::Bool, L::One),
            F(5, "wwids", T::Str, L::Many),
        ],
        "core.v1.AzureFileVolumeSource" => {
            &[F(1, "secretName", T::Str, L::One), F(2, "shareName", T::Str, L::One), F(3, "readOnly", T::Bool, L::One)]
        }
        "core.v1.ConfigMapVolumeSource" => &[
            F(1, "localObjectReference", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(2, "items", T::Msg("core.v1.KeyToPath"), L::Many),
            F(3, "defaultMode", T::Int, L::One),
            F(4, "optional", T::Bool, L::One),
            F(5, "defaultUser", T::Int, L::One),
        ],
        "core.v1.VsphereVirtualDiskVolumeSource" => &[
            F(1, "volumePath", T::Str, L::One),
            F(2, "fsType", T::Str, L::One),
            F(3, "storagePolicyName", T::Str, L::One),
            F(4, "storagePolicyID", T::Str, L::One),
        ],
        "core.v1.QuobyteVolumeSource" => &[
            F(1, "registry", T::Str, L::One),
            F(2, "volume", T::Str, L::One),
            F(3, "readOnly", T::Bool, L::One),
            F(4, "user", T::Str, L::One),
            F(5, "group", T::Str, L::One),
            F(6, "tenant", T::Str, L::One),
        ],
        "core.v1.AzureDiskVolumeSource" => &[
            F(1, "diskName", T::Str, L::One),
            F(2, "diskURI", T::Str, L::One),
            F(3, "cachingMode", T::Str, L::One),
            F(4, "fsType", T::Str, L::One),
            F(5, "readOnly", T::Bool, L::One),
            F(6, "kind", T::Str, L::One),
        ],
        "core.v1.PhotonPersistentDiskVolumeSource" => &[F(1, "pdID", T::Str, L::One), F(2, "fsType", T::Str, L::One)],
        "core.v1.ProjectedVolumeSource" => &[
            F(1, "sources", T::Msg("core.v1.VolumeProjection"), L::Many),
            F(2, "defaultMode", T::Int, L::One),
            F(3, "defaultUser", T::Int, L::One),
        ],
        "core.v1.PortworxVolumeSource" => {
            &[F(1, "volumeID", T::Str, L::One), F(2, "fsType", T::Str, L::One), F(3, "readOnly", T::Bool, L::One)]
        }
        "core.v1.ScaleIOVolumeSource" => &[
            F(1, "gateway", T::Str, L::One),
            F(2, "system", T::Str, L::One),
            F(3, "secretRef", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(4, "sslEnabled", T::Bool, L::One),
            F(5, "protectionDomain", T::Str, L::One),
            F(6, "storagePool", T::Str, L::One),
            F(7, "storageMode", T::Str, L::One),
            F(8, "volumeName", T::Str, L::One),
            F(9, "fsType", T::Str, L::One),
            F(10, "readOnly", T::Bool, L::One),
        ],
        "core.v1.StorageOSVolumeSource" => &[
            F(1, "volumeName", T::Str, L::One),
            F(2, "volumeNamespace", T::Str, L::One),
            F(3, "fsType", T::Str, L::One),
            F(4, "readOnly", T::Bool, L::One),
            F(5, "secretRef", T::Msg("core.v1.LocalObjectReference"), L::One),
        ],
        "core.v1.CSIVolumeSource" => &[
            F(1, "driver", T::Str, L::One),
            F(2, "readOnly", T::Bool, L::One),
            F(3, "fsType", T::Str, L::One),
            F(4, "volumeAttributes", T::Str, L::Map),
            F(5, "nodePublishSecretRef", T::Msg("core.v1.LocalObjectReference"), L::One),
        ],
        "core.v1.EphemeralVolumeSource" => {
            &[F(1, "volumeClaimTemplate", T::Msg("core.v1.PersistentVolumeClaimTemplate"), L::One)]
        }
        "core.v1.ImageVolumeSource" => &[F(1, "reference", T::Str, L::One), F(2, "pullPolicy", T::Str, L::One)],
        "core.v1.ConfigMapEnvSource" => &[
            F(1, "localObjectReference", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(2, "optional", T::Bool, L::One),
        ],
        "core.v1.SecretEnvSource" => &[
            F(1, "localObjectReference", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(2, "optional", T::Bool, L::One),
        ],
        "core.v1.EnvVarSource" => &[
            F(1, "fieldRef", T::Msg("core.v1.ObjectFieldSelector"), L::One),
            F(2, "resourceFieldRef", T::Msg("core.v1.ResourceFieldSelector"), L::One),
            F(3, "configMapKeyRef", T::Msg("core.v1.ConfigMapKeySelector"), L::One),
            F(4, "secretKeyRef", T::Msg("core.v1.SecretKeySelector"), L::One),
            F(5, "fileKeyRef", T::Msg("core.v1.FileKeySelector"), L::One),
        ],
        "core.v1.ContainerRestartRuleOnExitCodes" => {
            &[F(1, "operator", T::Str, L::One), F(2, "values", T::Int, L::Many)]
        }
        "core.v1.ProbeHandler" => &[
            F(1, "exec", T::Msg("core.v1.ExecAction"), L::One),
            F(2, "httpGet", T::Msg("core.v1.HTTPGetAction"), L::One),
            F(3, "tcpSocket", T::Msg("core.v1.TCPSocketAction"), L::One),
            F(4, "grpc", T::Msg("core.v1.GRPCAction"), L::One),
        ],
        "core.v1.LifecycleHandler" => &[
            F(1, "exec", T::Msg("core.v1.ExecAction"), L::One),
            F(2, "httpGet", T::Msg("core.v1.HTTPGetAction"), L::One),
            F(3, "tcpSocket", T::Msg("core.v1.TCPSocketAction"), L::One),
            F(4, "sleep", T::Msg("core.v1.SleepAction"), L::One),
        ],
        "core.v1.Capabilities" => &[F(1, "add", T::Str, L::Many), F(2, "drop", T::Str, L::Many)],
        "core.v1.NodeSelector" => &[F(1, "nodeSelectorTerms", T::Msg("core.v1.NodeSelectorTerm"), L::Many)],
        "core.v1.PreferredSchedulingTerm" => {
            &[F(1, "weight", T::Int, L::One), F(2, "preference", T::Msg("core.v1.NodeSelectorTerm"), L::One)]
        }
        "core.v1.PodAffinityTerm" => &[
            F(1, "labelSelector", T::Msg("meta.v1.LabelSelector"), L::One),
            F(2, "namespaces", T::Str, L::Many),
            F(3, "topologyKey", T::Str, L::One),
            F(4, "namespaceSelector", T::Msg("meta.v1.LabelSelector"), L::One),
            F(5, "matchLabelKeys", T::Str, L::Many),
            F(6, "mismatchLabelKeys", T::Str, L::Many),
        ],
        "core.v1.WeightedPodAffinityTerm" => {
            &[F(1, "weight", T::Int, L::One), F(2, "podAffinityTerm", T::Msg("core.v1.PodAffinityTerm"), L::One)]
        }
        "core.v1.KeyToPath" => &[
            F(1, "key", T::Str, L::One),
            F(2, "path", T::Str, L::One),
            F(3, "mode", T::Int, L::One),
            F(4, "user", T::Int, L::One),
        ],
        "core.v1.DownwardAPIVolumeFile" => &[
            F(1, "path", T::Str, L::One),
            F(2, "fieldRef", T::Msg("core.v1.ObjectFieldSelector"), L::One),
            F(3, "resourceFieldRef", T::Msg("core.v1.ResourceFieldSelector"), L::One),
            F(4, "mode", T::Int, L::One),
            F(5, "user", T::Int, L::One),
        ],
        "core.v1.VolumeProjection" => &[
            F(1, "secret", T::Msg("core.v1.SecretProjection"), L::One),
            F(2, "downwardAPI", T::Msg("core.v1.DownwardAPIProjection"), L::One),
            F(3, "configMap", T::Msg("core.v1.ConfigMapProjection"), L::One),
            F(4, "serviceAccountToken", T::Msg("core.v1.ServiceAccountTokenProjection"), L::One),
            F(5, "clusterTrustBundle", T::Msg("core.v1.ClusterTrustBundleProjection"), L::One),
            F(6, "podCertificate", T::Msg("core.v1.PodCertificateProjection"), L::One),
        ],
        "core.v1.PersistentVolumeClaimTemplate" => &[
            F(1, "metadata", T::Msg("meta.v1.ObjectMeta"), L::One),
            F(2, "spec", T::Msg("core.v1.PersistentVolumeClaimSpec"), L::One),
        ],
        "core.v1.ObjectFieldSelector" => &[F(1, "apiVersion", T::Str, L::One), F(2, "fieldPath", T::Str, L::One)],
        "core.v1.ResourceFieldSelector" => &[
            F(1, "containerName", T::Str, L::One),
            F(2, "resource", T::Str, L::One),
            F(3, "divisor", T::Quantity, L::One),
        ],
        "core.v1.ConfigMapKeySelector" => &[
            F(1, "localObjectReference", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(2, "key", T::Str, L::One),
            F(3, "optional", T::Bool, L::One),
        ],
        "core.v1.SecretKeySelector" => &[
            F(1, "localObjectReference", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(2, "key", T::Str, L::One),
            F(3, "optional", T::Bool, L::One),
        ],
        "core.v1.FileKeySelector" => &[
            F(1, "volumeName", T::Str, L::One),
            F(2, "path", T::Str, L::One),
            F(3, "key", T::Str, L::One),
            F(4, "optional", T::Bool, L::One),
        ],
        "core.v1.ExecAction" => &[F(1, "command", T::Str, L::Many)],
        "core.v1.HTTPGetAction" => &[
            F(1, "path", T::Str, L::One),
            F(2, "port", T::IntOrString, L::One),
            F(3, "host", T::Str, L::One),
            F(4, "scheme", T::Str, L::One),
            F(5, "httpHeaders", T::Msg("core.v1.HTTPHeader"), L::Many),
            F(6, "protocol", T::Str, L::One),
        ],
        "core.v1.TCPSocketAction" => &[F(1, "port", T::IntOrString, L::One), F(2, "host", T::Str, L::One)],
        "core.v1.GRPCAction" => {
            &[F(1, "port", T::Int, L::One), F(2, "service", T::Str, L::One), F(3, "mode", T::Str, L::One)]
        }
        "core.v1.SleepAction" => &[F(1, "seconds", T::Int, L::One)],
        "core.v1.NodeSelectorTerm" => &[
            F(1, "matchExpressions", T::Msg("core.v1.NodeSelectorRequirement"), L::Many),
            F(2, "matchFields", T::Msg("core.v1.NodeSelectorRequirement"), L::Many),
        ],
        "core.v1.SecretProjection" => &[
            F(1, "localObjectReference", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(2, "items", T::Msg("core.v1.KeyToPath"), L::Many),
            F(4, "optional", T::Bool, L::One),
        ],
        "core.v1.DownwardAPIProjection" => &[F(1, "items", T::Msg("core.v1.DownwardAPIVolumeFile"), L::Many)],
        "core.v1.ConfigMapProjection" => &[
            F(1, "localObjectReference", T::Msg("core.v1.LocalObjectReference"), L::One),
            F(2, "items", T::Msg("core.v1.KeyToPath"), L::Many),
            F(4, "optional", T::Bool, L::One),
        ],
        "core.v1.ServiceAccountTokenProjection" => &[
            F(1, "audience", T::Str, L::One),
            F(2, "expirationSeconds", T::Int, L::One),
            F(3, "path", T::Str, L::One),
            F(4, "user", T::Int, L::One),
        ],
        "core.v1.ClusterTrustBundleProjection" => &[
            F(1, "name", T::Str, L::One),
            F(2, "signerName", T::Str, L::One),
            F(3, "labelSelector", T::Msg("meta.v1.LabelSelector"), L::One),
            F(5, "optional", T::Bool, L::One),
            F(4, "path", T::Str, L::One),
            F(6, "user", T::Int, L::One),
        ],
        "core.v1.PodCertificateProjection" => &[
            F(1, "signerName", T::Str, L::One),
            F(2, "keyType", T::Str, L::One),
            F(3, "maxExpirationSeconds", T::Int, L::One),
            F(4, "credentialBundlePath", T::Str, L::One),
            F(5, "keyPath", T::Str, L::One),
            F(6, "certificateChainPath", T::Str, L::One),
            F(7, "userAnnotations", T::Str, L::Map),
            F(8, "user", T::Int, L::One),
        ],
        "core.v1.PersistentVolumeClaimSpec" => &[
            F(1, "accessModes", T::Str, L::Many),
            F(4, "selector", T::Msg("meta.v1.LabelSelector"), L::One),
            F(2, "resources", T::Msg("core.v1.VolumeResourceRequirements"), L::One),
            F(3, "volumeName", T::Str, L::One),
            F(5, "storageClassName", T::Str, L::One),
            F(6, "volumeMode", T::Str, L::One),
            F(7, "dataSource", T::Msg("core.v1.TypedLocalObjectReference"), L::One),
            F(8, "dataSourceRef", T::Msg("core.v1.TypedObjectReference"), L::One),
            F(9, "volumeAttributesClassName", T::Str, L::One),
        ],
        "core.v1.HTTPHeader" => &[F(1, "name", T::Str, L::One), F(2, "value", T::Str, L::One)],
        "core.v1.NodeSelectorRequirement" => {
            &[F(1, "key", T::Str, L::One), F(2, "operator", T::Str, L::One), F(3, "values", T::Str, L::Many)]
        }
        "core.v1.VolumeResourceRequirements" => {
            &[F(1, "limits", T::Quantity, L::Map), F(2, "requests", T::Quantity, L::Map)]
        }
        "core.v1.TypedLocalObjectReference" => {
            &[F(1, "apiGroup", T::Str, L::One), F(2, "kind", T::Str, L::One), F(3, "name", T::Str, L::One)]
        }
        "core.v1.TypedObjectReference" => &[
            F(1, "apiGroup", T::Str, L::One),
            F(2, "kind", T::Str, L::One),
            F(3, "name", T::Str, L::One),
            F(4, "namespace", T::Str, L::One),
        ],
        _ => return None,
    })
}
