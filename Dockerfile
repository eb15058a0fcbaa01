# Taskhoster on an empty image: the static release binary and nothing else,
# so building needs no base image from a registry. Build with `make docker`
# (it builds bin/release/taskhoster on the host first).
#
#   docker run -p 8080:8080 -v $PWD/hosts:/etc/taskhoster/hosts:ro -v taskhoster:/data taskhoster
FROM scratch
COPY bin/release/taskhoster /taskhoster
# /data belongs to the user the server runs as; a fresh named volume mounted
# there takes its owner.
COPY --chown=65534:65534 packaging/docker/data/ /data/
ENV TASKHOSTER_HOSTS=/etc/taskhoster/hosts \
    TASKHOSTER_ITEMS=/data/items \
    TASKHOSTER_LOGS=/data/logs \
    TASKHOSTER_ADDR=:8080 \
    TASKHOSTER_ADMIN_ADDR=:9090
USER 65534:65534
VOLUME ["/data"]
EXPOSE 8080 9090
ENTRYPOINT ["/taskhoster"]
CMD ["serve"]
