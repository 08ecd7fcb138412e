# vllm-autotune on vLLM's official image: the tuner added beside the image's own vLLM, which
# stays as the image has it (no reinstall, no upgrade; the build fails if anything would change it).
#
# NOT BUILT HERE: the machine this was written on has no docker. It follows vLLM's image
# documentation; the install itself (the project with --no-deps, then its own dependencies with
# every package of the environment held at its version) is what
# tests/integration/test_install_beside_vllm.py runs against a local vLLM.
#
#   docker build -t vllm-autotune .                                         # vLLM 0.26.0
#   docker build --build-arg VLLM_IMAGE=vllm/vllm-openai:v0.27.0 -t vllm-autotune .
#   docker run --gpus all -v ~/.cache/huggingface:/root/.cache/huggingface -v "$PWD/runs:/work/runs" \
#       vllm-autotune search mixed --model meta-llama/Llama-3.1-8B-Instruct
#
# The image's oldest supported vLLM is 0.26.0 (serving/vllm_support.py); an older one is
# refused by `autotune` in one line.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.26.0
FROM ${VLLM_IMAGE}

WORKDIR /opt/vllm-autotune
COPY pyproject.toml README.md ./
# configs: the shipped scenarios and model shapes, a package of data that installs with the rest.
COPY configs configs
COPY serving serving
COPY objectives objectives
COPY loadgen loadgen
COPY storage storage
COPY vllm_http vllm_http
COPY search search
COPY app app

# 1. what the image has, as constraints; 2. the tuner alone; 3. its dependencies that the image
# lacks, nothing the image has moved; 4. the proof: no package of the image changed version.
RUN python3 -m pip list --format=freeze | sort > /tmp/image-packages.txt \
 && python3 -m pip install --no-cache-dir --no-deps . \
 && python3 -c "import importlib.metadata as m; print(*(r for r in m.requires('vllm-autotune') if 'extra ==' not in r), sep='\n')" \
      > /tmp/autotune-requirements.txt \
 && python3 -m pip install --no-cache-dir -c /tmp/image-packages.txt -r /tmp/autotune-requirements.txt \
 && python3 -m pip list --format=freeze | sort | comm -23 /tmp/image-packages.txt - > /tmp/changed.txt \
 && if [ -s /tmp/changed.txt ]; then echo "changed in the image:"; cat /tmp/changed.txt; exit 1; fi \
 && autotune --help > /dev/null

# Studies, logs and exports go to runs/ here: mount a volume on /work/runs to keep them.
WORKDIR /work
ENTRYPOINT ["autotune"]
CMD ["--help"]
