"""Deployment artefacts: Dockerfile, docker-compose.yml, the Helm chart and examples/."""
