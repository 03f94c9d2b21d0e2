package deploytest

// kafkaTopic and kafkaUser are the fields of Strimzi's kafka.strimzi.io/v1beta2
// resources that the strimzi overlay uses; strict decoding into them fails
// on a misspelt field. They are not Strimzi's full schema.
type kafkaTopic struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   strimziObjMeta `json:"metadata"`
	Spec       struct {
		Partitions int               `json:"partitions"`
		Replicas   int               `json:"replicas"`
		Config     map[string]string `json:"config"`
	} `json:"spec"`
}

type kafkaUser struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   strimziObjMeta `json:"metadata"`
	Spec       struct {
		Authentication struct {
			Type string `json:"type"`
		} `json:"authentication"`
		Authorization struct {
			Type string `json:"type"`
			ACLs []struct {
				Resource struct {
					Type        string `json:"type"`
					Name        string `json:"name"`
					PatternType string `json:"patternType"`
				} `json:"resource"`
				Operations []string `json:"operations"`
			} `json:"acls"`
		} `json:"authorization"`
	} `json:"spec"`
}

type strimziObjMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}
