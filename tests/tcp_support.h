// Ports for the env launcher's tests (runtime/tcp/): never a fixed number. free_port() binds port
// 0 on the loopback address, reads the port the system chose and closes the socket, so that a
// rank 0 started next can listen there (the tests run in parallel: each asks for its own).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace pipeplan::testing {

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("free_port: socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: bind");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace pipeplan::testing
