"""Checks of the container files (Dockerfile, .dockerignore, compose.yaml, docker/entrypoint.sh), without Docker."""
