# fleet_marl's OpenEnv server as a Hugging Face Docker Space (docs/llm_agents.md, "Deploy").
# Build and run locally:
#   docker build -t fleet-marl .
#   docker run -p 7860:7860 -e FLEET_MARL_MODE=ego -e FLEET_MARL_TOKEN=<a long random string> fleet-marl
# then: openenv validate --url http://127.0.0.1:7860   (validate sends no token: run it against a container
# started with -e FLEET_MARL_INSECURE=1 and no FLEET_MARL_TOKEN)
# On a public Space set FLEET_MARL_TOKEN as a secret: without it the server refuses to start, unless the
# operator sets FLEET_MARL_INSECURE=1 (anyone who reaches the Space may then open sessions).
# The image is not built by CI. The trace tasks replay the samples shipped in the package.
FROM python:3.11-slim

# Spaces run the container as user 1000
RUN useradd -m -u 1000 user
WORKDIR /home/user/app

COPY --chown=user pyproject.toml README.md ./
COPY --chown=user docker/requirements.txt ./docker/requirements.txt
COPY --chown=user fleet_marl ./fleet_marl
# the core and the [openenv] extra (no torch, no Ray), every package pinned in docker/requirements.txt
# ('make docker-lock'), from one index, PyPI; --no-deps: nothing unpinned comes in
RUN pip install --no-cache-dir --index-url https://pypi.org/simple --no-deps -r docker/requirements.txt \
 && pip install --no-cache-dir --index-url https://pypi.org/simple --no-deps --no-build-isolation .

USER user
ENV FLEET_MARL_MODE=ego \
    FLEET_MARL_TASK=easy \
    FLEET_MARL_MAX_SESSIONS=128 \
    FLEET_MARL_OPPONENTS=precision_expert \
    PYTHONUNBUFFERED=1
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import os, urllib.request; t = os.environ.get('FLEET_MARL_TOKEN'); urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:7860/health', headers={'Authorization': 'Bearer ' + t} if t else {}), timeout=3)"
# on 0.0.0.0 the server refuses to start without FLEET_MARL_TOKEN unless FLEET_MARL_INSECURE is set
CMD ["sh", "-c", "fleet-marl serve --host 0.0.0.0 --port 7860 --mode \"$FLEET_MARL_MODE\" --task \"$FLEET_MARL_TASK\" --max-sessions \"$FLEET_MARL_MAX_SESSIONS\" --opponents \"$FLEET_MARL_OPPONENTS\" ${FLEET_MARL_INSECURE:+--insecure}"]
