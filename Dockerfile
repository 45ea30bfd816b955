# fleet_marl's OpenEnv server as a Hugging Face Docker Space (docs/llm_agents.md, "Deploy").
# Build and run locally:
#   docker build -t fleet-marl .
#   docker run -p 7860:7860 -e FLEET_MARL_MODE=ego -e FLEET_MARL_TOKEN=<a long random string> fleet-marl
# then: openenv validate --url http://127.0.0.1:7860   (run without FLEET_MARL_TOKEN: validate sends no token)
# On a public Space set FLEET_MARL_TOKEN as a secret: without it the server warns that anyone can open sessions.
# The image is not built by CI. The trace tasks replay the samples shipped in the package.
FROM python:3.11-slim

# Spaces run the container as user 1000
RUN useradd -m -u 1000 user
WORKDIR /home/user/app

COPY --chown=user pyproject.toml README.md ./
COPY --chown=user fleet_marl ./fleet_marl
# torch and ray[rllib] are core dependencies (fleet-marl train); the CPU-only torch wheel index
# keeps CUDA out of the image (see the docs)
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu ".[openenv]"

USER user
ENV FLEET_MARL_MODE=ego \
    FLEET_MARL_TASK=easy \
    FLEET_MARL_MAX_SESSIONS=8 \
    FLEET_MARL_OPPONENTS=precision_expert \
    PYTHONUNBUFFERED=1
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import os, urllib.request; t = os.environ.get('FLEET_MARL_TOKEN'); urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:7860/health', headers={'Authorization': 'Bearer ' + t} if t else {}), timeout=3)"
CMD ["sh", "-c", "fleet-marl serve --host 0.0.0.0 --port 7860 --mode \"$FLEET_MARL_MODE\" --task \"$FLEET_MARL_TASK\" --max-sessions \"$FLEET_MARL_MAX_SESSIONS\" --opponents \"$FLEET_MARL_OPPONENTS\""]
