// Package check holds the schema check of the Kubernetes set in deploy/k8s
// (go test in this directory; make deploy-check runs it). It is a module
// of its own so that the main module does not depend on the Kubernetes
// API types and Kustomize.
package check
