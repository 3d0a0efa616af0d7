# syntax=docker/dockerfile:1
# The server image: dependencies are installed (and better-sqlite3 compiled if need be) in a build
# stage; the final image holds Node, the production node_modules and the sources, and runs as `node`.
FROM node:20-bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev

FROM node:20-bookworm-slim
# git serves hosted project repositories (git http-backend) and runs repository migrations.
RUN apt-get update && apt-get install -y --no-install-recommends git ca-certificates && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8080 DPC_DATA_DIR=/data
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY package.json ./
COPY bin ./bin
COPY src ./src
# /repositories: where compose mounts the volume of hosted repositories that its instances share.
RUN mkdir /data /repositories && chown node:node /data /repositories
USER node
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD ["node", "-e", "fetch('http://127.0.0.1:'+process.env.PORT+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "bin/dpc.js"]
CMD ["serve"]
