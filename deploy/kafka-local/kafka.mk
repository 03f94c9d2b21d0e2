# Makefile fragment: a local single-node Apache Kafka (KRaft) for development and tests.
# Included from the top-level Makefile; see deploy/kafka-local/README.md.
#
#   make kafka-up                     # 127.0.0.1:9092, controller on 9093
#   make kafka-up KAFKA_PORT=19092    # another port (controller on KAFKA_PORT+1)
#   FERRY_KAFKA_ADDRESS=127.0.0.1:9092 go test ./...   # tests against it
#   make kafka-down

KAFKA_PORT ?= 9092
# The script's path, from wherever this fragment was included (the repo root in practice).
KAFKA_LOCAL_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
KAFKA_SH := $(KAFKA_LOCAL_DIR)/kafka.sh

.PHONY: kafka-up kafka-down kafka-status

kafka-up: ## Start a local Apache Kafka (KRaft) on 127.0.0.1:$(KAFKA_PORT)
	@KAFKA_PORT=$(KAFKA_PORT) bash $(KAFKA_SH) start

kafka-down: ## Stop the local Kafka started by kafka-up and free its port
	@KAFKA_PORT=$(KAFKA_PORT) bash $(KAFKA_SH) stop

kafka-status: ## Tell whether the local Kafka on 127.0.0.1:$(KAFKA_PORT) is running and answering
	@KAFKA_PORT=$(KAFKA_PORT) bash $(KAFKA_SH) status
