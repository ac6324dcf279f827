# One image for every gpuattr role (agent, worker, sink, sim, receiver).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gpuattr ./gpuattr
COPY agents ./agents
COPY streams ./streams
COPY sinks ./sinks
COPY proto ./proto
COPY sim ./sim
RUN pip install --no-cache-dir . && useradd --uid 10001 --no-create-home gpuattr
USER 10001
ENTRYPOINT ["gpuattr"]
